//! Parsing a GGUF header with every count, length and offset checked.
//!
//! The header is read through a buffered reader, never by loading the file:
//! Engram tables are tens of GiB. Every length read from the file is checked
//! against the bytes that remain before anything is allocated for it, so a
//! forged count fails with a format error instead of an allocation.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use super::{
    align_up, Array, GgufHeader, TensorInfo, Value, ValueType, DEFAULT_ALIGNMENT, MAGIC, MAX_DIMS,
    VERSION,
};
use crate::{Error, Result};

/// Headers larger than this are refused: real ones (vocabularies and merges
/// included) are a few tens of MiB, and the bound caps what a forged file can
/// make us allocate.
pub const MAX_HEADER_BYTES: u64 = 512 << 20;

/// Arrays nested deeper than this are refused (real files nest at most once).
const MAX_NESTING: u32 = 4;

/// Largest `general.alignment` accepted.
const MAX_ALIGNMENT: u64 = 1 << 30;

/// Reads the header of the GGUF file at `path`.
pub fn read_header(path: &Path) -> Result<GgufHeader> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
    read_header_from(BufReader::with_capacity(1 << 20, file), len, path)
}

/// Reads a GGUF header from `reader`, the start of a file of `file_size`
/// bytes; `path` names the file in errors.
pub fn read_header_from<R: Read>(reader: R, file_size: u64, path: &Path) -> Result<GgufHeader> {
    let mut p = Parser {
        reader,
        pos: 0,
        limit: file_size.min(MAX_HEADER_BYTES),
        file_size,
        path,
    };
    p.parse()
}

struct Parser<'a, R> {
    reader: R,
    /// Bytes consumed so far.
    pos: u64,
    /// The header must end before this offset.
    limit: u64,
    file_size: u64,
    path: &'a Path,
}

impl<R: Read> Parser<'_, R> {
    fn err(&self, field: impl Into<String>, reason: impl Into<String>) -> Error {
        Error::format(self.path, field, reason)
    }

    fn remaining(&self) -> u64 {
        self.limit.saturating_sub(self.pos)
    }

    /// Fails unless `n` more bytes are available for `field`.
    fn need(&self, n: u64, field: &str) -> Result<()> {
        if n <= self.remaining() {
            return Ok(());
        }
        if self.limit < self.file_size {
            Err(self.err(
                field,
                format!(
                    "needs {n} bytes at offset {}: the header would exceed the {MAX_HEADER_BYTES}-byte limit",
                    self.pos
                ),
            ))
        } else {
            Err(self.err(
                field,
                format!(
                    "truncated: needs {n} bytes at offset {}, the file has {}",
                    self.pos, self.file_size
                ),
            ))
        }
    }

    fn bytes(&mut self, n: u64, field: &str) -> Result<Vec<u8>> {
        self.need(n, field)?;
        // `need` bounded n by the header limit, so this allocation is too.
        let mut buf = vec![0u8; n as usize];
        self.reader.read_exact(&mut buf).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                self.err(field, format!("truncated at offset {}", self.pos))
            } else {
                Error::io(self.path, e)
            }
        })?;
        self.pos += n;
        Ok(buf)
    }

    fn array_of<const N: usize>(&mut self, field: &str) -> Result<[u8; N]> {
        let v = self.bytes(N as u64, field)?;
        let mut a = [0u8; N];
        a.copy_from_slice(&v);
        Ok(a)
    }

    fn u32(&mut self, field: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array_of(field)?))
    }

    fn u64(&mut self, field: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array_of(field)?))
    }

    fn string(&mut self, field: &str) -> Result<String> {
        let len = self.u64(field)?;
        if len > self.remaining() {
            return Err(self.err(
                field,
                format!(
                    "string length {len} at offset {} exceeds the {} bytes left",
                    self.pos - 8,
                    self.remaining()
                ),
            ));
        }
        let raw = self.bytes(len, field)?;
        String::from_utf8(raw).map_err(|_| self.err(field, "string is not valid UTF-8"))
    }

    fn parse(&mut self) -> Result<GgufHeader> {
        let magic = self.u32("header.magic")?;
        if magic != MAGIC {
            return Err(self.err(
                "header.magic",
                format!("not a GGUF file (magic {magic:#010x}, expected \"GGUF\")"),
            ));
        }
        let version = self.u32("header.version")?;
        if version != VERSION {
            return Err(self.err(
                "header.version",
                format!("GGUF version {version} is not supported (expected {VERSION})"),
            ));
        }
        let n_tensors = self.u64("header.tensor_count")?;
        let n_kv = self.u64("header.metadata_kv_count")?;
        // Each pair takes at least 12 bytes (key length + type), each tensor info 24.
        self.check_count(n_kv, 12, "header.metadata_kv_count")?;
        self.check_count(n_tensors, 24, "header.tensor_count")?;

        let metadata = self.parse_metadata(n_kv)?;
        let alignment = alignment_of(&metadata).map_err(|r| self.err("general.alignment", r))?;
        let tensors = self.parse_tensor_infos(n_tensors, alignment)?;
        let data_start = align_up(self.pos, alignment)
            .ok_or_else(|| self.err("header", "data section offset overflows"))?;
        if data_start > self.file_size {
            return Err(self.err(
                "header",
                format!(
                    "data section would start at {data_start}, past the end of the file ({} bytes)",
                    self.file_size
                ),
            ));
        }
        for t in &tensors {
            let end = data_start.checked_add(t.offset);
            if end.is_none_or(|e| e > self.file_size) {
                return Err(self.err(
                    format!("tensor {}.offset", t.name),
                    format!(
                        "data offset {} is past the end of the file ({} bytes, data section at {data_start})",
                        t.offset, self.file_size
                    ),
                ));
            }
        }
        Ok(GgufHeader {
            version,
            metadata,
            tensors,
            alignment,
            data_start,
            file_size: self.file_size,
        })
    }

    fn check_count(&self, count: u64, min_each: u64, field: &str) -> Result<()> {
        if count
            .checked_mul(min_each)
            .is_none_or(|b| b > self.remaining())
        {
            return Err(self.err(
                field,
                format!(
                    "count {count} cannot fit in the {} bytes left of the file",
                    self.remaining()
                ),
            ));
        }
        Ok(())
    }

    fn parse_metadata(&mut self, n_kv: u64) -> Result<Vec<(String, Value)>> {
        let mut out: Vec<(String, Value)> = Vec::with_capacity(n_kv.min(4096) as usize);
        let mut seen = std::collections::HashSet::new();
        for i in 0..n_kv {
            let key = self.string(&format!("metadata[{i}].key"))?;
            let tag = self.u32(&key)?;
            let ty = ValueType::from_u32(tag)
                .ok_or_else(|| self.err(&key, format!("unknown value type {tag}")))?;
            let value = self.value(ty, &key, 0)?;
            if !seen.insert(key.clone()) {
                return Err(self.err(&key, "metadata key appears twice"));
            }
            out.push((key, value));
        }
        Ok(out)
    }

    fn value(&mut self, ty: ValueType, field: &str, depth: u32) -> Result<Value> {
        Ok(match ty {
            ValueType::U8 => Value::U8(self.array_of::<1>(field)?[0]),
            ValueType::I8 => Value::I8(self.array_of::<1>(field)?[0] as i8),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array_of(field)?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array_of(field)?)),
            ValueType::U32 => Value::U32(self.u32(field)?),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array_of(field)?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array_of(field)?)),
            ValueType::Bool => Value::Bool(self.bool(field)?),
            ValueType::String => Value::String(self.string(field)?),
            ValueType::Array => Value::Array(self.array(field, depth)?),
            ValueType::U64 => Value::U64(self.u64(field)?),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array_of(field)?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array_of(field)?)),
        })
    }

    fn bool(&mut self, field: &str) -> Result<bool> {
        match self.array_of::<1>(field)?[0] {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(self.err(field, format!("bool byte {b} is neither 0 nor 1"))),
        }
    }

    fn array(&mut self, field: &str, depth: u32) -> Result<Array> {
        if depth >= MAX_NESTING {
            return Err(self.err(
                field,
                format!("arrays nested deeper than {MAX_NESTING} levels"),
            ));
        }
        let tag = self.u32(field)?;
        let ty = ValueType::from_u32(tag)
            .ok_or_else(|| self.err(field, format!("unknown array element type {tag}")))?;
        let count = self.u64(field)?;
        self.check_count(count, ty.min_size(), field).map_err(|_| {
            self.err(
                field,
                format!(
                    "array of {count} {ty:?} elements cannot fit in the {} bytes left",
                    self.remaining()
                ),
            )
        })?;
        if let Some(size) = ty.fixed_size() {
            // Bounded by check_count above.
            let raw = self.bytes(count * size, field)?;
            return self.fixed_array(ty, &raw, field);
        }
        // Strings and nested arrays: count is bounded by the bytes left divided
        // by each element's minimum size, so the capacity is bounded too.
        let count = count as usize;
        if ty == ValueType::String {
            let mut v = Vec::with_capacity(count);
            for _ in 0..count {
                v.push(self.string(field)?);
            }
            Ok(Array::String(v))
        } else {
            let mut v = Vec::with_capacity(count);
            for _ in 0..count {
                v.push(self.array(field, depth + 1)?);
            }
            Ok(Array::Array(v))
        }
    }

    fn fixed_array(&self, ty: ValueType, raw: &[u8], field: &str) -> Result<Array> {
        fn le<const N: usize, T>(raw: &[u8], f: impl Fn([u8; N]) -> T) -> Vec<T> {
            raw.chunks_exact(N)
                .map(|c| f(c.try_into().expect("chunk of N bytes")))
                .collect()
        }
        Ok(match ty {
            ValueType::U8 => Array::U8(raw.to_vec()),
            ValueType::I8 => Array::I8(raw.iter().map(|&b| b as i8).collect()),
            ValueType::U16 => Array::U16(le(raw, u16::from_le_bytes)),
            ValueType::I16 => Array::I16(le(raw, i16::from_le_bytes)),
            ValueType::U32 => Array::U32(le(raw, u32::from_le_bytes)),
            ValueType::I32 => Array::I32(le(raw, i32::from_le_bytes)),
            ValueType::F32 => Array::F32(le(raw, f32::from_le_bytes)),
            ValueType::U64 => Array::U64(le(raw, u64::from_le_bytes)),
            ValueType::I64 => Array::I64(le(raw, i64::from_le_bytes)),
            ValueType::F64 => Array::F64(le(raw, f64::from_le_bytes)),
            ValueType::Bool => {
                if let Some(b) = raw.iter().find(|&&b| b > 1) {
                    return Err(self.err(field, format!("bool byte {b} is neither 0 nor 1")));
                }
                Array::Bool(raw.iter().map(|&b| b == 1).collect())
            }
            ValueType::String | ValueType::Array => unreachable!("not fixed-size"),
        })
    }

    fn parse_tensor_infos(&mut self, n_tensors: u64, alignment: u64) -> Result<Vec<TensorInfo>> {
        let mut out = Vec::with_capacity(n_tensors.min(1 << 16) as usize);
        let mut seen = std::collections::HashSet::new();
        for i in 0..n_tensors {
            let name = self.string(&format!("tensor[{i}].name"))?;
            let rank = self.u32(&format!("tensor {name}.n_dims"))?;
            if rank == 0 || rank > MAX_DIMS {
                return Err(self.err(
                    format!("tensor {name}.n_dims"),
                    format!("rank {rank} is outside 1..={MAX_DIMS}"),
                ));
            }
            let mut dims = Vec::with_capacity(rank as usize);
            for _ in 0..rank {
                dims.push(self.u64(&format!("tensor {name}.dims"))?);
            }
            let ggml_type = self.u32(&format!("tensor {name}.type"))?;
            let offset = self.u64(&format!("tensor {name}.offset"))?;
            if offset % alignment != 0 {
                return Err(self.err(
                    format!("tensor {name}.offset"),
                    format!("data offset {offset} is not a multiple of the alignment {alignment}"),
                ));
            }
            if !seen.insert(name.clone()) {
                return Err(self.err(format!("tensor {name}"), "tensor name appears twice"));
            }
            out.push(TensorInfo {
                name,
                dims,
                ggml_type,
                offset,
            });
        }
        Ok(out)
    }
}

/// The data alignment the metadata declares, checked.
fn alignment_of(metadata: &[(String, Value)]) -> std::result::Result<u64, String> {
    let Some((_, v)) = metadata.iter().find(|(k, _)| k == "general.alignment") else {
        return Ok(DEFAULT_ALIGNMENT);
    };
    let a = v
        .as_u64()
        .ok_or_else(|| format!("must be an unsigned integer, found {:?}", v.value_type()))?;
    if a == 0 || !a.is_power_of_two() || a > MAX_ALIGNMENT {
        return Err(format!(
            "{a} is not a power of two between 1 and {MAX_ALIGNMENT}"
        ));
    }
    Ok(a)
}
