//! The examples' positional arguments: a missing required one prints the
//! usage line, a malformed number names the argument; both exit with
//! status 2 instead of running with a value the caller did not mean.

// Each example uses only the accessors it needs.
#![allow(dead_code)]

use std::str::FromStr;

/// An example's command line and its usage line.
pub struct Args {
    args: Vec<String>,
    usage: &'static str,
}

impl Args {
    /// This process's arguments; `usage` (after the program name) is
    /// printed when one is missing or malformed.
    pub fn new(usage: &'static str) -> Args {
        Args {
            args: std::env::args().collect(),
            usage,
        }
    }

    /// Argument `i` (1-based), which must be given.
    pub fn required(&self, i: usize) -> &str {
        match self.optional(i) {
            Some(arg) => arg,
            None => self.fail("missing argument"),
        }
    }

    /// Argument `i` (1-based), if given.
    pub fn optional(&self, i: usize) -> Option<&str> {
        self.args.get(i).map(String::as_str)
    }

    /// Argument `i` (1-based), the number `name` of the usage line, or
    /// `default` when it is not given.
    pub fn number<T: FromStr>(&self, i: usize, name: &str, default: T) -> T {
        match self.optional(i) {
            None => default,
            Some(arg) => arg
                .parse()
                .unwrap_or_else(|_| self.fail(&format!("{name}: not a number: {arg:?}"))),
        }
    }

    fn fail(&self, why: &str) -> ! {
        eprintln!("{why}\nusage: {}", self.usage);
        std::process::exit(2);
    }
}
