//! Output files and directories that appear under their final name only when
//! complete.
//!
//! Writers build under a temporary name beside the destination (same
//! directory, so the final rename is atomic) and rename on success. If the
//! process dies, only a hidden `.NAME.XXXX.tmp` is left, which nothing
//! mistakes for a model; if it returns an error, the temporary is removed.

use std::fs::File;
use std::io::Write;
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

fn hidden_prefix(path: &Path) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    format!(".{name}.")
}

impl TempFile {
    /// Creates a temporary file in `path`'s directory.
    pub fn create_for(path: &Path) -> Result<TempFile> {
        let dir = parent_of(path);
        let temp = tempfile::Builder::new()
            .prefix(&hidden_prefix(path))
            .suffix(".tmp")
            .tempfile_in(dir)
            .map_err(|e| Error::io(dir, e))?;
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
        let temp = tempfile::Builder::new()
            .prefix(&hidden_prefix(path))
            .suffix(".tmp")
            .tempdir_in(parent)
            .map_err(|e| Error::io(parent, e))?;
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
