//! The device under the tables: how many random 4 KiB uncached reads per
//! second it serves at the engine's depth, and the eviction of the tables
//! from the page cache that cold runs start with. The one probe and the one
//! eviction of the workspace: the bench's floor ([`crate::floor`]) divides
//! by the probe's rate and `engram iobench` ([`crate::iobench`]) reports it
//! beside its own phases. Measured for a few seconds and cached per model
//! file and machine, so repeated runs do not pay for it.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use engram::io::batch::BounceBuf;
use engram::io::{cachectl, PAGE};
use engram::model::Model;
use engram::{Error, Result};
use serde::{Deserialize, Serialize};

/// What the bench knows of the device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceReport {
    /// Random 4 KiB uncached reads per second at `depth`.
    pub iops: f64,
    /// Reads in flight (threads each doing one `pread` at a time).
    pub depth: usize,
    /// How long the measurement ran, seconds (0 when given).
    pub seconds: f64,
    /// Reads it completed.
    pub reads: u64,
    /// `measured`, `cached` (an earlier measurement of this file on this
    /// machine) or `given` (`--device-iops`).
    pub source: String,
    /// Machine and file identity the measurement is keyed by.
    pub key: String,
}

/// How the bench learns the device's IOPS.
#[derive(Debug, Clone, PartialEq)]
pub enum DeviceMode {
    /// Measure for `seconds` at the engine's depth unless `cache` (a JSON
    /// file) holds a measurement of the same file on the same machine.
    Measure {
        /// Length of a fresh measurement.
        seconds: f64,
        /// The cache file; `None`: no caching.
        cache: Option<PathBuf>,
    },
    /// A known figure (a fake device in tests, or one measured elsewhere).
    Iops(f64),
    /// No floor in the report.
    Off,
}

impl DeviceMode {
    /// Checks the IOPS or the measurement length is usable.
    pub fn validate(&self) -> Result<()> {
        match *self {
            DeviceMode::Iops(iops) if !(iops.is_finite() && iops > 0.0) => {
                Err(Error::InvalidArgument(format!(
                    "--device-iops {iops}: expected a positive number of reads per second"
                )))
            }
            DeviceMode::Measure { seconds, .. }
                if !(seconds.is_finite() && seconds > 0.0 && seconds <= 600.0) =>
            {
                Err(Error::InvalidArgument(format!(
                    "--device-seconds {seconds}: expected more than 0 and at most 600"
                )))
            }
            _ => Ok(()),
        }
    }

    /// Measure for 3 s, cached in [`default_cache`].
    pub fn default_measure() -> DeviceMode {
        DeviceMode::Measure {
            seconds: 3.0,
            cache: default_cache(),
        }
    }
}

/// `$XDG_CACHE_HOME/engram/device.json`, else `~/.cache/engram/device.json`.
pub fn default_cache() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("engram").join("device.json"))
}

/// Something that reads page `index` (of `pages()`) into a 4 KiB buffer:
/// the table files, or a fake device in tests.
pub trait PageReader: Sync {
    /// Pages that may be read.
    fn pages(&self) -> u64;
    /// Reads page `index` into `buf` (4 KiB, aligned).
    fn read_page(&self, index: u64, buf: &mut [u8]) -> io::Result<()>;
}

/// Runs `depth` threads reading random pages of `reader` for `duration`;
/// returns the reads done and the time they took.
pub fn measure(
    reader: &dyn PageReader,
    depth: usize,
    duration: Duration,
) -> Result<(u64, Duration)> {
    let pages = reader.pages();
    if pages == 0 || depth == 0 {
        return Err(Error::InvalidArgument(format!(
            "device measurement over {pages} pages at depth {depth}"
        )));
    }
    let failed = AtomicBool::new(false);
    // A fresh seed each measurement: a fixed one reads the same pages every
    // time, which a cache below this machine (a virtual disk's host) can
    // serve after the first run, so the rate would overstate the device.
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
        ^ u64::from(std::process::id()).rotate_left(32);
    let started = Instant::now();
    let deadline = started + duration;
    let results: Vec<Result<u64>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..depth)
            .map(|i| {
                let failed = &failed;
                scope.spawn(move || {
                    let mut buf = BounceBuf::zeroed(PAGE as usize)?;
                    let mut rng = seed ^ 0x9e37_79b9_7f4a_7c15u64.wrapping_mul(i as u64 + 1);
                    let mut reads = 0u64;
                    while Instant::now() < deadline && !failed.load(Ordering::Relaxed) {
                        let page = splitmix_below(&mut rng, pages);
                        if let Err(e) = reader.read_page(page, buf.as_mut_slice()) {
                            failed.store(true, Ordering::Relaxed);
                            return Err(Error::io("device measurement", e));
                        }
                        reads += 1;
                    }
                    Ok(reads)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join().unwrap_or_else(|_| {
                    Err(Error::io(
                        "device measurement",
                        io::Error::other("a thread panicked"),
                    ))
                })
            })
            .collect()
    });
    let took = started.elapsed();
    let mut reads = 0;
    for r in results {
        reads += r?;
    }
    Ok((reads, took))
}

/// One random draw in `0..n` (splitmix64, multiply-shift).
fn splitmix_below(state: &mut u64, n: u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    ((u128::from(z ^ (z >> 31)) * u128::from(n)) >> 64) as u64
}

/// The pages of a model's tables, opened uncached (`O_DIRECT` on Linux,
/// `F_NOCACHE` on macOS), so each read reaches the device.
struct TablePages {
    /// Per table region: the file, its first page and page count.
    regions: Vec<(File, u64, u64)>,
}

impl TablePages {
    fn open(model: &Model) -> Result<TablePages> {
        let mut regions = Vec::new();
        let parts = model.tables.iter().flat_map(|t| {
            t.shards
                .iter()
                .flat_map(move |s| s.parts.iter().map(move |p| (s, p)))
        });
        for (shard, part) in parts {
            let path = &part.file;
            let file = OpenOptions::new()
                .read(true)
                .custom_flags(cachectl::DIRECT_OPEN_FLAGS)
                .open(path)
                .map_err(|e| Error::io(path, e))?;
            cachectl::set_nocache(&file).map_err(|e| Error::io(path, e))?;
            let end = part.offset + shard.rows * u64::from(part.bytes_per_row);
            let first = part.offset.div_ceil(PAGE);
            // Whole pages inside the table only, so no read meets the file's end.
            let pages = (end / PAGE).saturating_sub(first);
            if pages > 0 {
                regions.push((file, first, pages));
            }
        }
        Ok(TablePages { regions })
    }
}

impl PageReader for TablePages {
    fn pages(&self) -> u64 {
        self.regions.iter().map(|r| r.2).sum()
    }

    fn read_page(&self, mut index: u64, buf: &mut [u8]) -> io::Result<()> {
        for (file, first, pages) in &self.regions {
            if index < *pages {
                return file.read_exact_at(buf, (first + index) * PAGE);
            }
            index -= pages;
        }
        Err(io::Error::other("page index beyond the tables"))
    }
}

/// The device IOPS for `model` under `mode` at `depth`, or `None` for
/// [`DeviceMode::Off`]. `note` hears what is being done.
pub fn probe(
    model: &Model,
    depth: usize,
    mode: &DeviceMode,
    mut note: impl FnMut(&str),
) -> Result<Option<DeviceReport>> {
    mode.validate()?;
    let (seconds, cache) = match mode {
        DeviceMode::Off => return Ok(None),
        DeviceMode::Iops(iops) => {
            return Ok(Some(DeviceReport {
                iops: *iops,
                depth,
                seconds: 0.0,
                reads: 0,
                source: "given".into(),
                key: String::new(),
            }));
        }
        DeviceMode::Measure { seconds, cache } => (*seconds, cache.as_deref()),
    };
    let key = identity(model, depth)?;
    if let Some(found) = cache.and_then(|c| load(c).remove(&key)) {
        return Ok(Some(DeviceReport {
            source: "cached".into(),
            ..found
        }));
    }
    note(&format!(
        "measuring the device: random 4 KiB uncached reads at depth {depth} for {seconds} s"
    ));
    let pages = TablePages::open(model)?;
    let (reads, took) = measure(&pages, depth, Duration::from_secs_f64(seconds))?;
    let report = DeviceReport {
        iops: reads as f64 / took.as_secs_f64(),
        depth,
        seconds: took.as_secs_f64(),
        reads,
        source: "measured".into(),
        key: key.clone(),
    };
    if let Some(cache) = cache {
        // A cache that cannot be written costs a re-measurement next time,
        // not this run.
        if let Err(e) = store(cache, &key, &report) {
            note(&format!(
                "device cache {} not written: {e}",
                cache.display()
            ));
        }
    }
    Ok(Some(report))
}

/// Drops every table file's cached pages (Linux: fsync +
/// `POSIX_FADV_DONTNEED`; macOS: `F_NOCACHE`, as it cannot evict without
/// root), each file once; `evicted` hears each file and what was done.
pub fn evict_tables(model: &Model, mut evicted: impl FnMut(&Path, &str)) -> Result<()> {
    let files: BTreeSet<&Path> = model.tables.iter().flat_map(|t| t.files()).collect();
    for path in files {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let what = cachectl::evict(&file).map_err(|e| Error::io(path, e))?;
        evicted(path, what);
    }
    Ok(())
}

/// `host|dev:inode:size:mtime` of each table file, and the depth.
fn identity(model: &Model, depth: usize) -> Result<String> {
    let mut files: Vec<&Path> = model.tables.iter().flat_map(|t| t.files()).collect();
    files.dedup();
    let mut key = hostname();
    for path in files {
        let m = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
        key.push_str(&format!(
            "|{}:{}:{}:{}.{}",
            m.dev(),
            m.ino(),
            m.len(),
            m.mtime(),
            m.mtime_nsec()
        ));
    }
    key.push_str(&format!("|depth {depth}"));
    Ok(key)
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    if ok {
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        "unknown-host".into()
    }
}

/// The cache's entries; an unreadable or malformed cache is empty.
fn load(path: &Path) -> BTreeMap<String, DeviceReport> {
    std::fs::read(path)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default()
}

fn store(path: &Path, key: &str, report: &DeviceReport) -> io::Result<()> {
    let mut all = load(path);
    all.insert(key.to_string(), report.clone());
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(
        &tmp,
        serde_json::to_vec_pretty(&all).map_err(io::Error::other)?,
    )?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A device whose every read takes `latency`: at depth D it serves
    /// D / latency reads per second.
    struct FakeDevice {
        latency: Duration,
    }

    impl PageReader for FakeDevice {
        fn pages(&self) -> u64 {
            1 << 20
        }
        fn read_page(&self, _index: u64, buf: &mut [u8]) -> io::Result<()> {
            std::thread::sleep(self.latency);
            buf[0] = 1;
            Ok(())
        }
    }

    #[test]
    fn a_fake_device_measures_at_its_known_rate() {
        let fake = FakeDevice {
            latency: Duration::from_millis(2),
        };
        let (reads, took) = measure(&fake, 8, Duration::from_millis(400)).unwrap();
        let iops = reads as f64 / took.as_secs_f64();
        // 8 / 2 ms = 4,000 reads/s; sleeps only overshoot, so fewer, never more.
        assert!(iops <= 4_000.0 * 1.02, "{iops}");
        assert!(iops >= 4_000.0 * 0.6, "{iops}");
    }

    #[test]
    fn a_failing_device_is_an_error() {
        struct Broken;
        impl PageReader for Broken {
            fn pages(&self) -> u64 {
                4
            }
            fn read_page(&self, _: u64, _: &mut [u8]) -> io::Result<()> {
                Err(io::Error::other("bad sector"))
            }
        }
        let err = measure(&Broken, 4, Duration::from_secs(5)).unwrap_err();
        assert!(err.to_string().contains("bad sector"), "{err}");
        assert!(measure(&Broken, 0, Duration::from_secs(1)).is_err());
    }

    #[test]
    fn the_cache_keeps_entries_per_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/device.json");
        let entry = |iops| DeviceReport {
            iops,
            depth: 64,
            seconds: 3.0,
            reads: 3,
            source: "measured".into(),
            key: String::new(),
        };
        store(&path, "a", &entry(1.0)).unwrap();
        store(&path, "b", &entry(2.0)).unwrap();
        let all = load(&path);
        assert_eq!(all["a"].iops, 1.0);
        assert_eq!(all["b"].iops, 2.0);
        std::fs::write(&path, "not json").unwrap();
        assert!(load(&path).is_empty());
    }
}
