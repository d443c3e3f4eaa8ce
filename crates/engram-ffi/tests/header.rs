//! The committed `include/engram.h` is what cbindgen generates from the
//! crate now. `ENGRAM_BLESS=1 cargo test -p engram-ffi --test header`
//! rewrites it.

use std::path::Path;

#[test]
fn header_is_current() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(config)
        .generate()
        .expect("cbindgen parses the crate")
        .write(&mut generated);
    let generated = String::from_utf8(generated).expect("the header is UTF-8");
    let path = dir.join("include/engram.h");
    if std::env::var_os("ENGRAM_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&path, &generated).expect("write include/engram.h");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{} is stale: regenerate it with `ENGRAM_BLESS=1 cargo test -p engram-ffi --test header` \
         and commit it",
        path.display()
    );
}
