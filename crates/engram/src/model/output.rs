//! Output files and directories that appear under their final name only when
//! complete.
//!
//! Writers build under a temporary name beside the destination (same
//! directory, so the final rename is atomic) and rename on success. If the
//! process dies, only a hidden `.NAME.XXXX.tmp` is left, which nothing
//! mistakes for a model; if it returns an error, the temporary is removed.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// A file written under a temporary name, renamed to `path` by [`persist`](Self::persist).
#[derive(Debug)]
pub struct TempFile {
    temp: tempfile::NamedTempFile,
    path: PathBuf,
}

fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Creates, with `make` (a file or a directory), a hidden temporary entry
/// named after `path` beside it (`.NAME.XXXXXX.tmp`), so a crash leaves no
/// half-written file under the final name; a failure names the directory.
fn beside<T>(
    path: &Path,
    make: impl FnOnce(&tempfile::Builder, &Path) -> std::io::Result<T>,
) -> Result<T> {
    let dir = parent_of(path);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let prefix = format!(".{name}.");
    let mut builder = tempfile::Builder::new();
    builder.prefix(&prefix).suffix(".tmp");
    make(&builder, dir).map_err(|e| Error::io(dir, e))
}

impl TempFile {
    /// Creates a temporary file in `path`'s directory.
    pub fn create_for(path: &Path) -> Result<TempFile> {
        let temp = beside(path, |builder, dir| builder.tempfile_in(dir))?;
        Ok(TempFile {
            temp,
            path: path.to_path_buf(),
        })
    }

    /// The open file (for positioned writes).
    pub fn file(&self) -> &File {
        self.temp.as_file()
    }

    /// The final path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Renames the file to its final path (replacing any file there).
    pub fn persist(self) -> Result<()> {
        let path = self.path;
        // Temporary files are created private (0600); a model is not secret.
        set_mode(self.temp.path(), 0o644)?;
        self.temp
            .persist(&path)
            .map_err(|e| Error::io(&path, e.error))?;
        Ok(())
    }
}

impl Write for TempFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.temp.as_file_mut().write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.temp.as_file_mut().flush()
    }
}

/// A directory built under a temporary name, renamed to `path` by
/// [`persist`](Self::persist). `path` must not exist, or be an empty directory.
#[derive(Debug)]
pub struct TempDir {
    temp: Option<tempfile::TempDir>,
    path: PathBuf,
}

impl TempDir {
    /// Creates a temporary directory beside `path`.
    pub fn create_for(path: &Path) -> Result<TempDir> {
        if path.exists() && !is_empty_dir(path)? {
            return Err(Error::InvalidArgument(format!(
                "{} already exists and is not an empty directory; remove it first",
                path.display()
            )));
        }
        let parent = parent_of(path);
        std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
        let temp = beside(path, |builder, dir| builder.tempdir_in(dir))?;
        Ok(TempDir {
            temp: Some(temp),
            path: path.to_path_buf(),
        })
    }

    /// Where to write the directory's files for now.
    pub fn dir(&self) -> &Path {
        self.temp.as_ref().expect("not yet persisted").path()
    }

    /// Renames the directory to its final path.
    pub fn persist(mut self) -> Result<()> {
        let temp = self.temp.take().expect("not yet persisted");
        if self.path.exists() {
            // Checked empty at creation; an empty directory is replaced.
            std::fs::remove_dir(&self.path).map_err(|e| Error::io(&self.path, e))?;
        }
        let kept = temp.keep();
        set_mode(&kept, 0o755)?;
        std::fs::rename(&kept, &self.path).map_err(|e| {
            let _ = std::fs::remove_dir_all(&kept);
            Error::io(&self.path, e)
        })
    }
}

fn is_empty_dir(path: &Path) -> Result<bool> {
    if !path.is_dir() {
        return Ok(false);
    }
    let mut entries = std::fs::read_dir(path).map_err(|e| Error::io(path, e))?;
    Ok(entries.next().is_none())
}

fn set_mode(path: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| Error::io(path, e))
}

/// Block size for direct writes: offsets, lengths and buffer addresses are
/// multiples of it (4 KiB covers 512-byte and 4K-sector devices).
const DIRECT_BLOCK: usize = 4096;

/// Bytes staged per write.
const STAGE_BYTES: usize = 16 << 20;

/// A [`TempFile`] written front to back through one large aligned buffer.
///
/// On Linux the file is switched to `O_DIRECT`, so multi-GiB outputs (a
/// `--scale 8` model is 25 GB) go straight to the device instead of through
/// the page cache: on the development VM that is twice the buffered write
/// rate, and it does not evict what benchmarks have cached. Where direct I/O
/// is refused (tmpfs, other systems), the same buffer is written normally.
pub struct SequentialFile {
    file: TempFile,
    /// Backing storage; `stage_at..stage_at + STAGE_BYTES` is block-aligned.
    storage: Vec<u8>,
    stage_at: usize,
    /// Bytes staged but not yet written.
    staged: usize,
    /// Bytes written to the file so far (a multiple of the stage size).
    written: u64,
    direct: bool,
}

impl SequentialFile {
    /// Wraps `file`, enabling direct I/O where the system allows it.
    pub fn new(file: TempFile) -> SequentialFile {
        let storage = vec![0u8; STAGE_BYTES + DIRECT_BLOCK];
        let stage_at = storage.as_ptr().align_offset(DIRECT_BLOCK);
        let direct = set_direct(file.file(), true);
        SequentialFile {
            file,
            storage,
            stage_at,
            staged: 0,
            written: 0,
            direct,
        }
    }

    /// Whether writes bypass the page cache.
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    /// Appends `data`.
    pub fn write_all(&mut self, mut data: &[u8]) -> Result<()> {
        while !data.is_empty() {
            let n = data.len().min(STAGE_BYTES - self.staged);
            let at = self.stage_at + self.staged;
            self.storage[at..at + n].copy_from_slice(&data[..n]);
            self.staged += n;
            data = &data[n..];
            if self.staged == STAGE_BYTES {
                self.write_stage(STAGE_BYTES)?;
                self.written += STAGE_BYTES as u64;
                self.staged = 0;
            }
        }
        Ok(())
    }

    /// Writes what is staged and returns the file, ready to persist.
    pub fn finish(mut self) -> Result<TempFile> {
        let tail = self.staged;
        if tail > 0 {
            // Direct writes need whole blocks: pad with zeros, then cut the
            // file back to its true length.
            let padded = if self.direct {
                tail.div_ceil(DIRECT_BLOCK) * DIRECT_BLOCK
            } else {
                tail
            };
            let at = self.stage_at;
            self.storage[at + tail..at + padded].fill(0);
            self.write_stage(padded)?;
            let len = self.written + tail as u64;
            self.file
                .file()
                .set_len(len)
                .map_err(|e| Error::io(self.file.path(), e))?;
        }
        set_direct(self.file.file(), false);
        Ok(self.file)
    }

    fn write_stage(&mut self, len: usize) -> Result<()> {
        let buf = &self.storage[self.stage_at..self.stage_at + len];
        match self.file.file().write_all_at(buf, self.written) {
            Err(e) if self.direct && e.raw_os_error() == Some(libc::EINVAL) => {
                // The file system took O_DIRECT but refuses this write: go buffered.
                self.direct = set_direct(self.file.file(), false);
                self.file
                    .file()
                    .write_all_at(buf, self.written)
                    .map_err(|e| Error::io(self.file.path(), e))
            }
            other => other.map_err(|e| Error::io(self.file.path(), e)),
        }
    }
}

/// Turns `O_DIRECT` on or off; returns whether it is now on.
#[cfg(target_os = "linux")]
fn set_direct(file: &File, on: bool) -> bool {
    use std::os::unix::io::AsRawFd;
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on a file descriptor we own, with integer arguments only.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return false;
    }
    let wanted = if on {
        flags | libc::O_DIRECT
    } else {
        flags & !libc::O_DIRECT
    };
    // SAFETY: as above.
    let ok = unsafe { libc::fcntl(fd, libc::F_SETFL, wanted) } == 0;
    on && ok
}

/// Direct I/O is a Linux optimization here; elsewhere writes are buffered.
#[cfg(not(target_os = "linux"))]
fn set_direct(_file: &File, _on: bool) -> bool {
    false
}

/// One tensor of a safetensors file being written.
pub(crate) struct TensorSpec {
    /// Tensor name.
    pub name: String,
    /// safetensors dtype (`BF16`, `F8_E4M3`, ...).
    pub dtype: &'static str,
    /// Shape.
    pub shape: Vec<u64>,
    /// Bytes of its data.
    pub bytes: u64,
}

/// Writes the header of a safetensors file holding `tensors` (data in
/// order) and sizes the file; returns it and each tensor's absolute offset.
pub(crate) fn create_safetensors(path: &Path, tensors: &[TensorSpec]) -> Result<(std::fs::File, Vec<u64>)> {
    let mut header = serde_json::Map::new();
    header.insert("__metadata__".into(), serde_json::json!({"format": "pt"}));
    let mut at = 0u64;
    let mut relative = Vec::with_capacity(tensors.len());
    for t in tensors {
        header.insert(
            t.name.clone(),
            serde_json::json!({"dtype": t.dtype, "shape": t.shape, "data_offsets": [at, at + t.bytes]}),
        );
        relative.push(at);
        at += t.bytes;
    }
    let mut text =
        serde_json::to_vec(&header).map_err(|e| Error::InvalidArgument(e.to_string()))?;
    while text.len() % 8 != 0 {
        text.push(b' ');
    }
    let file = std::fs::File::create(path).map_err(|e| Error::io(path, e))?;
    let mut head = (text.len() as u64).to_le_bytes().to_vec();
    head.extend_from_slice(&text);
    file.write_all_at(&head, 0)
        .map_err(|e| Error::io(path, e))?;
    let start = head.len() as u64;
    file.set_len(start + at).map_err(|e| Error::io(path, e))?;
    Ok((file, relative.into_iter().map(|r| start + r).collect()))
}
