//! The committed `include/engram.h` is what cbindgen generates from the
//! crate now, with `engram_status` written from its Rust table.
//! `ENGRAM_BLESS=1 cargo test -p engram-ffi --test header` rewrites it.

use std::path::Path;

use engram_ffi::engram_status;

/// Columns of a comment line in the header, its indent included.
const WIDTH: usize = 75;

/// The C declaration of `engram_status`, as cbindgen writes an enum: the
/// type's docs, then each status under its meaning. cbindgen cannot write
/// it itself, as it does not see into the macro that declares the type.
fn status_enum() -> String {
    let mut c: String = engram_status::DOC
        .iter()
        .map(|line| format!("//{line}\n"))
        .collect();
    c.push_str("typedef enum engram_status {\n");
    for &status in engram_status::ALL {
        for line in wrap(status.meaning(), WIDTH - "  // ".len()) {
            c.push_str(&format!("  // {line}\n"));
        }
        let name = status.name().to_str().expect("status names are ASCII");
        c.push_str(&format!("  {name} = {},\n", status as i32));
    }
    c.push_str("} engram_status;\n");
    c
}

/// `header` with [`status_enum`] where cbindgen puts an enum it declares:
/// after the constants, before the first type.
fn with_status_enum(header: &str) -> String {
    let last_constant = header
        .rfind("\n#define ")
        .expect("the header has constants");
    let at = header[last_constant..]
        .find("\n\n")
        .map_or(header.len(), |end| last_constant + end + 2);
    format!("{}{}\n{}", &header[..at], status_enum(), &header[at..])
}

/// `text` in lines of at most `width` columns, broken between words.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for word in text.split_whitespace() {
        match lines.last_mut() {
            Some(line) if line.len() + 1 + word.len() <= width => {
                line.push(' ');
                line.push_str(word);
            }
            _ => lines.push(word.to_string()),
        }
    }
    lines
}

#[test]
fn header_is_current() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    // Declarations name the type as cbindgen names an enum it declared.
    let rename = (
        "engram_status".to_string(),
        "enum engram_status".to_string(),
    );
    config.export.rename.extend([rename]);
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(config)
        .generate()
        .expect("cbindgen parses the crate")
        .write(&mut generated);
    let generated = String::from_utf8(generated).expect("the header is UTF-8");
    let generated = with_status_enum(&generated);
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

#[test]
fn meanings_wrap_between_words_within_the_width() {
    assert_eq!(wrap("a bb ccc dddd", 6), ["a bb", "ccc", "dddd"]);
    assert_eq!(wrap("", 6), Vec::<String>::new());
}
