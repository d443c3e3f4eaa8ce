//! Builds `examples/c/engram_example.c` against the static library with the
//! platform's C compiler (the `cc` crate) and runs it on a small synthetic
//! model with a real tokenized prompt, in both row formats. The program
//! checks every row against `engram_rows_read` and fails on a mismatch.

use std::path::{Path, PathBuf};
use std::process::Command;

mod support;

use engram::layout;

/// Engram vocab divisor: about 94K rows (25 MB) per table.
const SCALE: u64 = 4096;
const PROMPT_TOKENS: usize = 3000;
const DECODE_STEPS: &str = "64";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The target triple of this test build, for the C compiler driver.
fn triple() -> &'static str {
    match (std::env::consts::ARCH, std::env::consts::OS) {
        ("x86_64", "linux") => "x86_64-unknown-linux-gnu",
        ("aarch64", "linux") => "aarch64-unknown-linux-gnu",
        ("aarch64", "macos") => "aarch64-apple-darwin",
        ("x86_64", "macos") => "x86_64-apple-darwin",
        (arch, os) => panic!("no C compiler triple known for {arch}-{os}; add it here"),
    }
}

/// The static library cargo built with this test (next to the test binary).
fn static_lib() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let lib = exe.with_file_name("libengram_ffi.a");
    assert!(lib.exists(), "{} not built", lib.display());
    lib
}

fn compile_example(out_dir: &Path) -> PathBuf {
    let root = repo_root();
    let compiler = cc::Build::new()
        .target(triple())
        .host(triple())
        .opt_level(1)
        .cargo_metadata(false)
        .include(root.join("crates/engram-ffi/include"))
        .get_compiler();
    let exe = out_dir.join("engram_example");
    let mut cmd = compiler.to_command();
    cmd.args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&exe)
        .arg(root.join("examples/c/engram_example.c"))
        .arg(static_lib());
    if cfg!(target_os = "macos") {
        cmd.args(["-framework", "CoreFoundation", "-lc", "-lm"]);
    } else {
        cmd.args([
            "-lpthread",
            "-ldl",
            "-lm",
            "-lrt",
            "-lutil",
            "-lgcc_s",
            "-lc",
        ]);
    }
    let out = cmd.output().expect("run the C compiler");
    assert!(
        out.status.success(),
        "compiling the C example failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// A prompt of this repository's docs tokenized with the vendored tokenizer.
fn prompt_tokens() -> Vec<u32> {
    let root = repo_root();
    let mut text = String::new();
    for doc in [
        "docs/ARCHITECTURE.md",
        "README.md",
        "crates/engram/src/prefetch/prefill/mod.rs",
    ] {
        text.push_str(&std::fs::read_to_string(root.join(doc)).expect("read a repo file"));
    }
    let tokenizer = layout::vendored_tokenizer().unwrap();
    let mut tokens =
        layout::encode(tokenizer, &text, layout::token_map::VENDORED_SOURCE_NAME).unwrap();
    assert!(
        tokens.len() >= PROMPT_TOKENS,
        "only {} tokens",
        tokens.len()
    );
    tokens.truncate(PROMPT_TOKENS);
    tokens
}

#[test]
fn c_example_checks_every_row_in_both_formats() {
    let dir = tempfile::tempdir().unwrap();
    let model = support::write_model(dir.path(), SCALE);
    let tokens_file = dir.path().join("tokens.txt");
    let text: Vec<String> = prompt_tokens().iter().map(u32::to_string).collect();
    std::fs::write(&tokens_file, text.join(" ")).unwrap();
    let exe = compile_example(dir.path());
    for format in ["raw", "f32"] {
        let out = Command::new(&exe)
            .arg(&model)
            .arg(&tokens_file)
            .arg(DECODE_STEPS)
            .arg(format)
            .output()
            .expect("run the C example");
        let stdout = String::from_utf8_lossy(&out.stdout);
        print!("{stdout}");
        assert!(
            out.status.success(),
            "the C example ({format}) failed ({}):\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.contains("all rows match engram_rows_read"),
            "{stdout}"
        );
    }
}
