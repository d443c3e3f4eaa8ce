//! Times loading a hot-row file cold: `HotSet::load` (`load`), or the
//! alternative it replaced, reading the file into fresh memory on a few
//! threads (`copy`). The file is evicted from the page cache first.
//!
//! `cargo run --release -p engram --example hot_load_parts -- HOT MODEL load|copy [THREADS]`
//! Compare with `dd if=HOT of=/dev/null bs=8M` after evicting it again.

mod args;

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Instant;

const CHUNK: usize = 4 << 20;

/// Reads `file` into `buf`, chunk `i` on thread `i % threads`.
fn read_parallel(file: &std::fs::File, buf: &mut [u8], threads: usize) {
    let mut shares: Vec<Vec<(u64, &mut [u8])>> = (0..threads).map(|_| Vec::new()).collect();
    for (i, c) in buf.chunks_mut(CHUNK).enumerate() {
        shares[i % threads].push(((i * CHUNK) as u64, c));
    }
    std::thread::scope(|s| {
        for share in shares {
            s.spawn(move || {
                for (at, c) in share {
                    file.read_exact_at(c, at).expect("read");
                }
            });
        }
    });
}

fn main() {
    let args = args::Args::new("hot_load_parts HOT MODEL load|copy [THREADS]");
    let (hot, model, mode) = (
        Path::new(args.required(1)),
        args.required(2),
        args.required(3),
    );
    let threads: usize = args.number(4, "THREADS", 2);
    let file = std::fs::File::open(hot).expect("open HOT");
    engram::io::cachectl::evict(&file).expect("evict");
    let len = file.metadata().expect("stat").len() as usize;
    let model = engram::model::Model::open(model).expect("open MODEL");
    let t = Instant::now();
    match mode {
        "load" => {
            let set = engram::hot::HotSet::load(hot, &model, false).expect("load");
            std::hint::black_box(&set);
        }
        "copy" => {
            let mut buf = vec![0u8; len];
            read_parallel(&file, &mut buf, threads);
            std::hint::black_box(&buf);
        }
        other => panic!("mode {other:?}: load or copy"),
    }
    let s = t.elapsed().as_secs_f64();
    println!("{mode}: {s:.3} s {:.2} GB/s", len as f64 / s / 1e9);
}
