//! Times ways of reading a hot-row file into fresh memory, cold, against
//! `HotSet::load`: `cargo run --release --example hot_load_parts -- HOT
//! MODEL MODE` with MODE one of `load`, `buffered`, `direct` (the file is
//! evicted from the page cache first).

use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::time::Instant;

const CHUNK: usize = 4 << 20;

fn read_parallel(file: &std::fs::File, buf: &mut [u8], threads: usize) {
    let mut shares: Vec<Vec<(u64, &mut [u8])>> = (0..threads).map(|_| Vec::new()).collect();
    for (i, c) in buf.chunks_mut(CHUNK).enumerate() {
        shares[i % threads].push(((i * CHUNK) as u64, c));
    }
    std::thread::scope(|s| {
        for share in shares {
            s.spawn(move || {
                for (at, c) in share {
                    let mut done = 0;
                    while done < c.len() {
                        let n = file.read_at(&mut c[done..], at + done as u64).unwrap();
                        if n == 0 {
                            break;
                        }
                        done += n;
                    }
                }
            });
        }
    });
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (hot, model, mode) = (&args[1], &args[2], args[3].as_str());
    let file = std::fs::File::open(hot).unwrap();
    engram::io::cachectl::evict(&file).unwrap();
    let len = file.metadata().unwrap().len() as usize;
    let t = Instant::now();
    match mode {
        "load" => {
            let model = engram::model::Model::open(model).unwrap();
            let set = engram::hot::HotSet::load(std::path::Path::new(hot), &model, false).unwrap();
            std::hint::black_box(&set);
        }
        "buffered" => {
            let mut buf = vec![0u8; len];
            let n: usize = std::env::var("THREADS").map_or(2, |v| v.parse().unwrap());
            read_parallel(&file, &mut buf, n);
            std::hint::black_box(&buf);
        }
        "direct" => {
            let direct = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECT)
                .open(hot)
                .unwrap();
            let size = len.next_multiple_of(4096);
            let layout = std::alloc::Layout::from_size_align(size, 4096).unwrap();
            // SAFETY: non-zero size; freed below with the same layout.
            let p = unsafe { std::alloc::alloc_zeroed(layout) };
            // SAFETY: `p` holds `size` zeroed bytes.
            let buf = unsafe { std::slice::from_raw_parts_mut(p, size) };
            read_parallel(&direct, buf, 2);
            std::hint::black_box(&buf);
            // SAFETY: allocated above with `layout`.
            unsafe { std::alloc::dealloc(p, layout) };
        }
        _ => panic!("mode"),
    }
    let s = t.elapsed().as_secs_f64();
    println!("{mode}: {s:.3} s {:.2} GB/s", len as f64 / s / 1e9);
}
