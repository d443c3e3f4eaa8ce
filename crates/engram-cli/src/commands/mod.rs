//! One module per subcommand.

pub mod iobench;
