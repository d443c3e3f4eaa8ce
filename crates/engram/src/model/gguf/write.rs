//! A streaming GGUF writer.
//!
//! The header (metadata and tensor infos) is written first, from declared
//! tensor sizes; tensor data then streams in declaration order through
//! [`GgufWriter::write`], padded to the alignment between tensors. The file is
//! built under a temporary name in the destination directory and renamed into
//! place by [`GgufWriter::finish`], so an interrupted run never leaves a file
//! under the final name.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use super::{align_up, Array, Value, DEFAULT_ALIGNMENT, MAGIC, VERSION};
use crate::model::output::TempFile;
use crate::{Error, Result};

/// Write buffer: large, so table data goes out in big sequential writes.
const WRITE_BUFFER: usize = 8 << 20;

/// A tensor to be written: its header entry and its data size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorDecl {
    /// Tensor name.
    pub name: String,
    /// Dimensions, innermost first.
    pub dims: Vec<u64>,
    /// ggml type id.
    pub ggml_type: u32,
    /// Data size in bytes.
    pub bytes: u64,
}

/// Writes a GGUF file: header at creation, then tensor data in order.
pub struct GgufWriter {
    out: BufWriter<TempFile>,
    path: PathBuf,
    alignment: u64,
    tensors: Vec<TensorDecl>,
    /// Index of the tensor being written.
    current: usize,
    /// Bytes of the current tensor written so far.
    done_in_current: u64,
}

impl GgufWriter {
    /// Creates `path` (under a temporary name until [`finish`](Self::finish))
    /// and writes the header. `general.alignment` in `metadata`, if present,
    /// sets the alignment (default 32).
    pub fn create(
        path: &Path,
        metadata: &[(String, Value)],
        tensors: Vec<TensorDecl>,
    ) -> Result<Self> {
        let alignment = match metadata.iter().find(|(k, _)| k == "general.alignment") {
            Some((_, v)) => v.as_u64().filter(|a| a.is_power_of_two()).ok_or_else(|| {
                Error::InvalidArgument("general.alignment must be a power of two".into())
            })?,
            None => DEFAULT_ALIGNMENT,
        };
        let header = encode_header(metadata, &tensors, alignment)?;
        let file = TempFile::create_for(path)?;
        let mut out = BufWriter::with_capacity(WRITE_BUFFER, file);
        out.write_all(&header).map_err(|e| Error::io(path, e))?;
        let mut w = GgufWriter {
            out,
            path: path.to_path_buf(),
            alignment,
            tensors,
            current: 0,
            done_in_current: 0,
        };
        w.skip_empty_tensors()?;
        Ok(w)
    }

    /// Appends tensor data; it flows into the declared tensors in order.
    pub fn write(&mut self, mut data: &[u8]) -> Result<()> {
        while !data.is_empty() {
            let Some(t) = self.tensors.get(self.current) else {
                return Err(Error::InvalidArgument(format!(
                    "{}: more data written than the declared tensors hold",
                    self.path.display()
                )));
            };
            let left = t.bytes - self.done_in_current;
            let n = (data.len() as u64).min(left) as usize;
            self.out
                .write_all(&data[..n])
                .map_err(|e| Error::io(&self.path, e))?;
            self.done_in_current += n as u64;
            data = &data[n..];
            self.skip_empty_tensors()?;
        }
        Ok(())
    }

    /// The tensor the next byte belongs to, if any are left.
    pub fn current_tensor(&self) -> Option<&TensorDecl> {
        self.tensors.get(self.current)
    }

    /// Checks that every declared byte was written, flushes, and renames the
    /// file to its final name.
    pub fn finish(self) -> Result<()> {
        if let Some(t) = self.tensors.get(self.current) {
            return Err(Error::InvalidArgument(format!(
                "{}: tensor {} has {} of {} bytes written",
                self.path.display(),
                t.name,
                self.done_in_current,
                t.bytes
            )));
        }
        let file = self
            .out
            .into_inner()
            .map_err(|e| Error::io(&self.path, e.into_error()))?;
        file.persist()
    }

    /// Moves past tensors whose data is complete, writing the padding after each.
    fn skip_empty_tensors(&mut self) -> Result<()> {
        while let Some(t) = self.tensors.get(self.current) {
            if self.done_in_current < t.bytes {
                break;
            }
            let is_last = self.current + 1 == self.tensors.len();
            if !is_last {
                let pad = padding(t.bytes, self.alignment);
                self.out
                    .write_all(&vec![0u8; pad as usize])
                    .map_err(|e| Error::io(&self.path, e))?;
            }
            self.current += 1;
            self.done_in_current = 0;
        }
        Ok(())
    }
}

fn padding(len: u64, alignment: u64) -> u64 {
    (alignment - len % alignment) % alignment
}

/// Serializes the header, computes each tensor's aligned offset, and pads to
/// the data section.
fn encode_header(
    metadata: &[(String, Value)],
    tensors: &[TensorDecl],
    alignment: u64,
) -> Result<Vec<u8>> {
    let mut h = Vec::new();
    h.extend_from_slice(&MAGIC.to_le_bytes());
    h.extend_from_slice(&VERSION.to_le_bytes());
    h.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    h.extend_from_slice(&(metadata.len() as u64).to_le_bytes());
    for (key, value) in metadata {
        put_str(&mut h, key);
        h.extend_from_slice(&(value.value_type() as u32).to_le_bytes());
        put_value(&mut h, value);
    }
    let mut offset = 0u64;
    for t in tensors {
        put_str(&mut h, &t.name);
        h.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
        for d in &t.dims {
            h.extend_from_slice(&d.to_le_bytes());
        }
        h.extend_from_slice(&t.ggml_type.to_le_bytes());
        h.extend_from_slice(&offset.to_le_bytes());
        offset = offset
            .checked_add(t.bytes)
            .and_then(|o| align_up(o, alignment))
            .ok_or_else(|| Error::InvalidArgument("tensor sizes overflow".into()))?;
    }
    let data_start = align_up(h.len() as u64, alignment).expect("header fits in memory");
    h.resize(data_start as usize, 0);
    Ok(h)
}

fn put_str(h: &mut Vec<u8>, s: &str) {
    h.extend_from_slice(&(s.len() as u64).to_le_bytes());
    h.extend_from_slice(s.as_bytes());
}

fn put_value(h: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => h.push(*x),
        Value::I8(x) => h.push(*x as u8),
        Value::U16(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => h.push(u8::from(*x)),
        Value::String(s) => put_str(h, s),
        Value::Array(a) => put_array(h, a),
        Value::U64(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => h.extend_from_slice(&x.to_le_bytes()),
    }
}

fn put_array(h: &mut Vec<u8>, a: &Array) {
    h.extend_from_slice(&(a.element_type() as u32).to_le_bytes());
    h.extend_from_slice(&(a.len() as u64).to_le_bytes());
    match a {
        Array::U8(v) => h.extend_from_slice(v),
        Array::I8(v) => h.extend(v.iter().map(|&x| x as u8)),
        Array::U16(v) => v.iter().for_each(|x| h.extend_from_slice(&x.to_le_bytes())),
        Array::I16(v) => v.iter().for_each(|x| h.extend_from_slice(&x.to_le_bytes())),
        Array::U32(v) => v.iter().for_each(|x| h.extend_from_slice(&x.to_le_bytes())),
        Array::I32(v) => v.iter().for_each(|x| h.extend_from_slice(&x.to_le_bytes())),
        Array::F32(v) => v.iter().for_each(|x| h.extend_from_slice(&x.to_le_bytes())),
        Array::Bool(v) => h.extend(v.iter().map(|&x| u8::from(x))),
        Array::String(v) => v.iter().for_each(|s| put_str(h, s)),
        Array::Array(v) => v.iter().for_each(|a| put_array(h, a)),
        Array::U64(v) => v.iter().for_each(|x| h.extend_from_slice(&x.to_le_bytes())),
        Array::I64(v) => v.iter().for_each(|x| h.extend_from_slice(&x.to_le_bytes())),
        Array::F64(v) => v.iter().for_each(|x| h.extend_from_slice(&x.to_le_bytes())),
    }
}
