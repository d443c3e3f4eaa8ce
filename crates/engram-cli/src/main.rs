//! The `engram` command: a thin shell over the `engram` library.

fn main() {
    println!("engram");
}
