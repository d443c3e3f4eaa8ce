//! The hot tier end to end on small synthetic models: profiling checked
//! against a direct count, rows bit-identical with and without the tier
//! (raw and f32, both tables, with and without the row cache), and bad
//! hot files refused with a clear error while the engine works without.

mod prefetch_util;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use engram::cache::{CachedSource, RowCache};
use engram::codec::Encoding;
use engram::hash::Hasher;
use engram::hot::profile::{self, CorpusOptions};
use engram::hot::{self, HotConfig, HotSet, HotSource, ProfileInfo};
use engram::io::{open_source, IoConfig, RowSource};
use engram::layout::{self, preset, token_map::VENDORED_SOURCE_NAME, Layout};
use engram::model::{synth, Model, NoProgress};
use engram::prefetch::{Engine, PrefetchConfig, RowFormat};
use prefetch_util::within;

const LIMIT: Duration = Duration::from_secs(120);

/// About 5.9K rows per table (scale 32768: about 11.7K): megabytes.
const SCALE: u64 = 65536;

fn small_layout(scale: u64) -> Layout {
    preset("deepseek-v4.1-flash", scale).unwrap()
}

fn write_model(dir: &Path, name: &str, scale: u64, seed: u64) -> Model {
    let path = dir.join(name);
    synth::write_gguf(
        &path,
        &small_layout(scale),
        Encoding::E4m3E8m0Row264,
        seed,
        &NoProgress,
    )
    .unwrap();
    Model::open(&path).unwrap()
}

/// Three small text files of this crate's sources, and one that is not
/// UTF-8 (skipped).
fn corpus(dir: &Path) -> Vec<PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    for (i, name) in ["hash.rs", "cache.rs", "layout/primes.rs"]
        .iter()
        .enumerate()
    {
        let to = dir.join(format!("c{i}.txt"));
        std::fs::copy(src.join(name), &to).unwrap();
        files.push(to);
    }
    let binary = dir.join("c3.bin");
    std::fs::write(&binary, [0xff, 0xfe, 0x00, 0x80]).unwrap();
    files.push(binary);
    files
}

/// Counts by hashing each file on its own, with a map.
fn direct_counts(layout: &Layout, files: &[PathBuf]) -> Vec<HashMap<u32, u64>> {
    let hasher = Hasher::new(layout).unwrap();
    let tokenizer = layout::vendored_tokenizer().unwrap();
    let mut counts = vec![HashMap::new(); layout.tables.len()];
    for f in files {
        let Ok(text) = std::fs::read_to_string(f) else {
            continue;
        };
        let tokens = layout::encode(tokenizer, &text, VENDORED_SOURCE_NAME).unwrap();
        let mut rows = Vec::new();
        hasher
            .hash(&mut hasher.new_history(), &tokens, None, &mut rows)
            .unwrap();
        for token in rows.chunks(hasher.rows_per_token()) {
            for (t, ids) in token.chunks(hasher.columns()).enumerate() {
                for &r in ids {
                    *counts[t].entry(r).or_insert(0) += 1;
                }
            }
        }
    }
    counts
}

/// The `k` most counted rows, ties to the smaller id, increasing.
fn direct_top(counts: &HashMap<u32, u64>, k: usize) -> Vec<u32> {
    let mut all: Vec<(u64, u32)> = counts.iter().map(|(&r, &c)| (c, r)).collect();
    all.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut top: Vec<u32> = all.iter().take(k).map(|&(_, r)| r).collect();
    top.sort_unstable();
    top
}

fn count(layout: &Layout, files: &[PathBuf], threads: usize) -> profile::CorpusCounts {
    let options = CorpusOptions {
        threads,
        max_tokens: None,
    };
    profile::count_corpus(layout, files, &options, &NoProgress).unwrap()
}

/// The model's tables through the default backend.
fn storage(model: &Model) -> Arc<dyn RowSource> {
    open_source(&model.tables, &IoConfig::default())
        .unwrap()
        .source
}

/// Profiles `files` on `model` and writes `hot_rows` rows per table to `out`.
fn make_hot(model: &Model, files: &[PathBuf], hot_rows: usize, out: &Path) {
    let counted = count(&model.layout, files, 2);
    let ids = (0..model.tables.len())
        .map(|t| counted.counts.top(t, hot_rows))
        .collect();
    let source = storage(model);
    profile::write_hot_file(
        out,
        model,
        source.as_ref(),
        ids,
        ProfileInfo::default(),
        &NoProgress,
    )
    .unwrap();
}

/// A model, the corpus, and a hot file of `hot_rows` rows per table made
/// from them, in a temporary directory.
fn fixture(hot_rows: usize) -> (tempfile::TempDir, Model, Vec<PathBuf>, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let model = write_model(dir.path(), "m.gguf", SCALE, 3);
    let files = corpus(dir.path());
    let out = dir.path().join("m.hot");
    make_hot(&model, &files, hot_rows, &out);
    (dir, model, files, out)
}

#[test]
fn profile_matches_a_direct_count_and_the_file_holds_the_model_rows() {
    within(LIMIT, || {
        let dir = tempfile::tempdir().unwrap();
        let model = write_model(dir.path(), "m.gguf", SCALE, 3);
        let files = corpus(dir.path());
        let counted = count(&model.layout, &files, 3);
        assert_eq!(counted.skipped, vec![files[3].clone()]);
        assert_eq!(counted.counts.documents(), 3);
        let direct = direct_counts(&model.layout, &files);
        for (t, table) in model.layout.tables.iter().enumerate() {
            for row in 0..table.rows as u32 {
                let want = direct[t].get(&row).copied().unwrap_or(0);
                assert_eq!(counted.counts.count(t, row), want, "table {t} row {row}");
            }
            assert_eq!(counted.counts.distinct(t), direct[t].len() as u64);
            for k in [1, 37, 500, direct[t].len() + 10] {
                assert_eq!(counted.counts.top(t, k), direct_top(&direct[t], k), "k {k}");
            }
        }
        // The same counts whatever the threads, and a token limit cuts at
        // the same place.
        let one = count(&model.layout, &files, 1);
        assert_eq!(one.counts.tokens(), counted.counts.tokens());
        let limited = |threads| {
            let options = CorpusOptions {
                threads,
                max_tokens: Some(1000),
            };
            profile::count_corpus(&model.layout, &files, &options, &NoProgress).unwrap()
        };
        let (a, b) = (limited(1), limited(3));
        assert_eq!(a.counts.tokens(), 1000);
        assert_eq!(a.counts.top(0, 300), b.counts.top(0, 300));

        let out = dir.path().join("m.hot");
        make_hot(&model, &files, 400, &out);
        let hot = HotSet::load(&out, &model, false).unwrap();
        for (t, table) in hot.tables().iter().enumerate() {
            assert_eq!(table.ids(), &direct_top(&direct[t], 400)[..]);
            let ids: Vec<u64> = table.ids().iter().map(|&r| u64::from(r)).collect();
            let mut raw = Vec::new();
            model.read_raw_rows(t, &ids, &mut raw).unwrap();
            for (k, &id) in table.ids().iter().enumerate() {
                assert_eq!(table.get(id), Some(&raw[k * 264..(k + 1) * 264]));
            }
            // A row that is not hot is not found.
            let cold = (0..u32::MAX).find(|r| table.ids().binary_search(r).is_err());
            assert_eq!(table.get(cold.unwrap()), None);
        }
    });
}

/// A prompt of text the corpus does not hold, tokenized.
fn prompt_tokens() -> Vec<u32> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/io/plan.rs");
    let text = std::fs::read_to_string(src).unwrap();
    let tokenizer = layout::vendored_tokenizer().unwrap();
    let mut tokens = layout::encode(tokenizer, &text, VENDORED_SOURCE_NAME).unwrap();
    tokens.truncate(700);
    tokens
}

/// Prefill and decode `tokens` through an engine on `source`: every row
/// delivered (raw bytes or f32 bits), and the stats.
fn run(
    model: &Model,
    source: Arc<dyn RowSource>,
    format: RowFormat,
    tokens: &[u32],
) -> (Vec<u8>, engram::stats::Stats) {
    let config = PrefetchConfig::default()
        .with_chunk_tokens(128)
        .with_first_chunk_tokens(32)
        .with_ring_chunks(2)
        .with_overlap_threshold(0)
        .with_format(format);
    let engine = Engine::for_model(model, source, config).unwrap();
    let mut seq = engine.sequence();
    let (prompt, decode) = tokens.split_at(600);
    let mut got = Vec::new();
    let mut prefill = seq.prefill(prompt, None).unwrap();
    let mut upto = 0;
    while upto < prompt.len() as u32 {
        upto = (upto + 100).min(prompt.len() as u32);
        for table in 0..2 {
            let view = prefill.wait(table, upto).unwrap();
            got.extend_from_slice(&bytes_of(&view));
        }
    }
    drop(prefill);
    for &token in decode {
        seq.step_begin(token).unwrap();
        for table in 0..2 {
            got.extend_from_slice(&bytes_of(&seq.step_wait(table).unwrap()));
        }
    }
    (got, seq.stats())
}

fn bytes_of(view: &engram::prefetch::RowsView<'_>) -> Vec<u8> {
    if view.is_f32() {
        view.to_f32_vec()
            .iter()
            .flat_map(|v| v.to_bits().to_le_bytes())
            .collect()
    } else {
        view.to_vec()
    }
}

#[test]
fn rows_are_bit_identical_with_and_without_the_hot_tier() {
    within(LIMIT, || {
        let (_dir, model, _, out) = fixture(800);
        let tokens = prompt_tokens();
        let cached = || -> Arc<dyn RowSource> {
            let cache = Arc::new(RowCache::new(1 << 20, 264));
            Arc::new(CachedSource::new(storage(&model), cache))
        };
        let config = HotConfig::default().with_path(Some(out.clone()));
        for format in [RowFormat::Raw, RowFormat::F32] {
            for with_cache in [false, true] {
                let base = if with_cache {
                    cached()
                } else {
                    storage(&model)
                };
                let (want, plain) = run(&model, base, format, &tokens);
                let base = if with_cache {
                    cached()
                } else {
                    storage(&model)
                };
                let (source, set) = hot::layer(&model, base, &config).unwrap();
                assert!(set.is_some() && source.name().starts_with("hot("));
                let (got, stats) = run(&model, source, format, &tokens);
                assert!(got == want, "{format:?} cache {with_cache}: rows differ");
                for t in 0..2 {
                    let (p, h) = (&plain.prefill.tables[t], &stats.prefill.tables[t]);
                    let (pd, hd) = (&plain.decode.tables[t], &stats.decode.tables[t]);
                    assert!(h.hot_hits > 0 && hd.hot_hits > 0, "table {t}: {h:?}");
                    assert_eq!(p.hot_hits + pd.hot_hits, 0);
                    // Hot rows are rows storage no longer reads (in a table
                    // this small, reads of whole pages may not drop).
                    let stored =
                        |s: &engram::stats::TableStats| s.rows_unique - s.cache_hits - s.hot_hits;
                    assert!(stored(h) < stored(p), "table {t}");
                    assert!(hd.rows_unique >= hd.hot_hits + hd.cache_hits);
                }
            }
        }
    });
}

/// `mutate` applied to a copy of a good hot file must make loading it fail
/// with a message holding `expect`.
fn refused(model: &Model, good: &Path, name: &str, mutate: impl Fn(&mut Vec<u8>), expect: &str) {
    let path = good.with_file_name(name);
    let mut bytes = std::fs::read(good).unwrap();
    mutate(&mut bytes);
    std::fs::write(&path, &bytes).unwrap();
    let config = HotConfig::default().with_path(Some(path.clone()));
    let storage = storage(model);
    let err = hot::layer(model, storage.clone(), &config)
        .err()
        .unwrap_or_else(|| panic!("{name} was accepted"))
        .to_string();
    assert!(err.contains(expect), "{name}: {err}");
    assert!(err.contains(&path.display().to_string()), "{name}: {err}");
    // The engine is usable without it.
    let engine = Engine::for_model(model, storage, PrefetchConfig::default()).unwrap();
    let mut seq = engine.sequence();
    seq.step_begin(5).unwrap();
    assert_eq!(seq.step_wait(1).unwrap().len(), 1);
}

#[test]
fn bad_hot_files_are_refused_with_a_clear_error() {
    within(LIMIT, || {
        let (dir, model, files, good) = fixture(300);
        let len = std::fs::metadata(&good).unwrap().len() as usize;
        refused(
            &model,
            &good,
            "trunc.hot",
            |b| b.truncate(len - 1000),
            "truncated",
        );
        refused(&model, &good, "tiny.hot", |b| b.truncate(20), "truncated");
        refused(
            &model,
            &good,
            "data.hot",
            |b| b[len / 2] ^= 1,
            "data checksum",
        );
        refused(
            &model,
            &good,
            "magic.hot",
            |b| b[0] = b'X',
            "not a hot-row file",
        );
        refused(&model, &good, "version.hot", |b| b[8] = 9, "version 9");
        // A byte of the JSON header (a space inside it would not parse as
        // the same header; flip a digit of a size instead).
        refused(
            &model,
            &good,
            "header.hot",
            |b| {
                let at = b.windows(9).position(|w| w == b"\"tokens\":").unwrap() + 9;
                b[at] = if b[at] == b'0' { b'1' } else { b'0' };
            },
            "header checksum",
        );

        // mlock: the rows are pinned, or the limit is named.
        match HotSet::load(&good, &model, true) {
            Ok(set) => assert!(set.locked()),
            Err(e) => assert!(e.to_string().contains("ulimit -l"), "{e}"),
        }

        // Another model: another layout (scale), named with this one.
        let other = write_model(dir.path(), "other.gguf", SCALE / 2, 3);
        let other_hot = dir.path().join("other.hot");
        make_hot(&other, &files, 300, &other_hot);
        let err = HotSet::load(&other_hot, &model, false)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("other.gguf") && err.contains("m.gguf"),
            "{err}"
        );
        assert!(err.contains("layout digest"), "{err}");
        // Same layout and sizes, other rows: caught by the sampled rows.
        let twin = write_model(dir.path(), "twin.gguf", SCALE, 4);
        let set = Arc::new(HotSet::load(&good, &twin, false).unwrap());
        let err = HotSource::new(storage(&twin), set)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("hot bytes differ"), "{err}");
    });
}
