//! `engram_table_info` on good engines: the facts a caller that takes raw
//! rows needs (sizes and encoding), for each row encoding.

mod support;

use std::ffi::CString;
use std::ptr::null_mut;

use engram::codec::Encoding;
use engram::layout::preset;
use engram::model::{synth, NoProgress};
use engram_ffi::*;
use support::ok;

fn table_facts(encoding: Encoding, format: u32) -> Vec<engram_table> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    let layout = preset("deepseek-v4.1-flash", 65536).unwrap();
    synth::write_gguf(&path, &layout, encoding, 3, &NoProgress).unwrap();
    let path = CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: (this test) every pointer is valid; the engine is closed
    // before the directory goes.
    unsafe {
        let mut opts: engram_options = std::mem::zeroed();
        ok(engram_options_default(&mut opts));
        opts.format = format;
        let mut engine = null_mut();
        ok(engram_open(path.as_ptr(), &opts, &mut engine));
        let facts = (0..2)
            .map(|t| {
                let mut table = std::mem::zeroed();
                ok(engram_table_info(engine, t, &mut table));
                table
            })
            .collect();
        ok(engram_close(engine));
        facts
    }
}

#[test]
fn each_table_says_its_encoding_and_row_sizes() {
    let cases = [
        (
            Encoding::E4m3E8m0Row264,
            ENGRAM_ENCODING_E4M3_E8M0_32_ROW264,
            264,
        ),
        (
            Encoding::Lloyd4E5m3Row136,
            ENGRAM_ENCODING_LLOYD4_E5M3_32_R136,
            136,
        ),
    ];
    for (encoding, code, stored) in cases {
        for (format, delivered) in [(ENGRAM_FORMAT_RAW, stored), (ENGRAM_FORMAT_F32, 1024)] {
            for (t, table) in table_facts(encoding, format).iter().enumerate() {
                assert_eq!(table.encoding, code, "{encoding:?} table {t}");
                assert_eq!(table.stored_row_bytes, stored);
                assert_eq!(table.row_bytes, delivered);
                assert!(table.rows > 0);
            }
        }
    }
}

#[test]
fn the_encoding_field_leaves_the_table_struct_s_layout_as_it_was() {
    // Callers built against the header before the field keep working: it
    // took the struct's tail padding.
    assert_eq!(std::mem::size_of::<engram_table>(), 24);
    assert_eq!(std::mem::offset_of!(engram_table, row_bytes), 16);
    assert_eq!(std::mem::offset_of!(engram_table, encoding), 20);
}
