//! A small GGUF (version 3) reader and a streaming writer.
//!
//! Only what Engram needs is interpreted (see `model::ds4`), but the reader
//! parses every metadata value type, nested arrays included, so it can walk
//! past the rest of a real model's header (tokenizer vocabularies, merges,
//! hyper-parameters). Everything is little-endian.
//!
//! File layout: magic `GGUF`, version (u32), tensor count (u64), metadata
//! count (u64), the metadata pairs (key string, value type, value), the tensor
//! infos (name, rank, dims innermost first, ggml type, offset relative to the
//! data section), then padding to `general.alignment` (default 32) and the data
//! section.

mod read;
// The writer serves the tools only (synth, pack, transcode).
#[cfg(feature = "tools")]
mod write;

pub use read::{read_header, read_header_from};
#[cfg(feature = "tools")]
pub use write::{GgufWriter, TensorDecl};

/// `GGUF` read as a little-endian u32.
pub const MAGIC: u32 = 0x4655_4747;

/// The GGUF version this crate reads and writes.
pub const VERSION: u32 = 3;

/// Data-section alignment when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;

/// ggml tensor type of signed bytes: how ds4 declares the packed Engram
/// tables (2-D, dims `[row_bytes, rows]`). Rows are opaque bytes to ggml.
pub const GGML_TYPE_I8: u32 = 24;

/// Largest tensor rank accepted (ggml itself uses at most 4).
pub const MAX_DIMS: u32 = 8;

/// The GGUF value types, written once: each type's name, tag, Rust type,
/// encoded size and, where the type alone does not say it, its encoding.
/// From this list come [`ValueType`] (with [`ValueType::from_u32`] and
/// [`ValueType::fixed_size`]), [`Value`] (one value, with
/// [`Value::value_type`]) and [`Array`] (homogeneous elements, with
/// [`Array::len`] and [`Array::element_type`]).
macro_rules! value_types {
    ($($(#[doc = $doc:literal])* $name:ident = $tag:literal: $ty:ty, $size:expr;)*) => {
        /// A GGUF metadata value type tag.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        #[repr(u32)]
        pub enum ValueType {
            $(#[doc = concat!("`", stringify!($ty), "`")] $(#[doc = $doc])* $name = $tag,)*
        }

        impl ValueType {
            /// Parses a type tag.
            pub fn from_u32(tag: u32) -> Option<ValueType> {
                match tag {
                    $($tag => Some(ValueType::$name),)*
                    _ => None,
                }
            }

            /// Encoded size of one value of a fixed-size type (`None` for
            /// strings and arrays).
            pub fn fixed_size(self) -> Option<u64> {
                match self {
                    $(ValueType::$name => $size,)*
                }
            }
        }

        /// One metadata value.
        #[derive(Debug, Clone, PartialEq)]
        pub enum Value {
            $(#[doc = concat!("`", stringify!($ty), "`")] $(#[doc = $doc])* $name($ty),)*
        }

        impl Value {
            /// The type tag of this value.
            pub fn value_type(&self) -> ValueType {
                match self {
                    $(Value::$name(_) => ValueType::$name,)*
                }
            }
        }

        /// A homogeneous metadata array.
        #[derive(Debug, Clone, PartialEq)]
        pub enum Array {
            $(#[doc = concat!("`", stringify!($name), "` elements")] $name(Vec<$ty>),)*
        }

        impl Array {
            /// Number of elements.
            pub fn len(&self) -> usize {
                match self {
                    $(Array::$name(v) => v.len(),)*
                }
            }

            /// The element type tag.
            pub fn element_type(&self) -> ValueType {
                match self {
                    $(Array::$name(_) => ValueType::$name,)*
                }
            }
        }
    };
}

value_types! {
    // name = tag: Rust type, bytes of one value (little-endian)
    U8 = 0: u8, Some(1);
    I8 = 1: i8, Some(1);
    U16 = 2: u16, Some(2);
    I16 = 3: i16, Some(2);
    U32 = 4: u32, Some(4);
    I32 = 5: i32, Some(4);
    F32 = 6: f32, Some(4);
    /// (one byte, 0 or 1)
    Bool = 7: bool, Some(1);
    /// (u64 length + UTF-8 bytes)
    String = 8: String, None;
    /// (element type, u64 count, elements)
    Array = 9: Array, None;
    U64 = 10: u64, Some(8);
    I64 = 11: i64, Some(8);
    F64 = 12: f64, Some(8);
}

impl ValueType {
    /// Smallest encoded size of one value (strings: the length; arrays: type + count).
    pub fn min_size(self) -> u64 {
        match self {
            ValueType::String => 8,
            ValueType::Array => 12,
            other => other.fixed_size().unwrap_or(1),
        }
    }
}

impl Value {
    /// The value as a non-negative integer, whatever its integer width.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// The value as an array.
    pub fn as_array(&self) -> Option<&Array> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

impl Array {
    /// True when the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The elements as non-negative integers, or `None` if the array is not
    /// of an integer type or holds a negative element.
    pub fn to_u64_vec(&self) -> Option<Vec<u64>> {
        fn conv<T: Copy>(v: &[T], f: impl Fn(T) -> Option<u64>) -> Option<Vec<u64>> {
            v.iter().map(|&x| f(x)).collect()
        }
        match self {
            Array::U8(v) => conv(v, |x| Some(x.into())),
            Array::U16(v) => conv(v, |x| Some(x.into())),
            Array::U32(v) => conv(v, |x| Some(x.into())),
            Array::U64(v) => Some(v.clone()),
            Array::I8(v) => conv(v, |x| u64::try_from(x).ok()),
            Array::I16(v) => conv(v, |x| u64::try_from(x).ok()),
            Array::I32(v) => conv(v, |x| u64::try_from(x).ok()),
            Array::I64(v) => conv(v, |x| u64::try_from(x).ok()),
            _ => None,
        }
    }
}

/// One tensor's entry in the header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// Tensor name.
    pub name: String,
    /// Dimensions, innermost (fastest-varying) first.
    pub dims: Vec<u64>,
    /// ggml type id.
    pub ggml_type: u32,
    /// Offset of the tensor's data relative to the data section.
    pub offset: u64,
}

/// A parsed GGUF header: metadata, tensor infos and where the data starts.
#[derive(Debug, Clone)]
pub struct GgufHeader {
    /// Format version (3).
    pub version: u32,
    /// Metadata pairs in file order.
    pub metadata: Vec<(String, Value)>,
    /// Tensor infos in file order.
    pub tensors: Vec<TensorInfo>,
    /// Data-section alignment (`general.alignment`, default 32).
    pub alignment: u64,
    /// Absolute byte offset of the data section.
    pub data_start: u64,
    /// Size of the file the header was read from.
    pub file_size: u64,
}

impl GgufHeader {
    /// The value of metadata key `key`, if present.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// The tensor named `name`, if present.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }
}

/// Rounds `value` up to a multiple of `align` (a power of two), or `None` on overflow.
pub fn align_up(value: u64, align: u64) -> Option<u64> {
    debug_assert!(align.is_power_of_two());
    value.checked_add(align - 1).map(|v| v & !(align - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every value type, nested arrays included, survives write then read,
    /// and tensors land at aligned offsets after an aligned data section.
    #[test]
    fn every_value_type_round_trips() {
        let metadata: Vec<(String, Value)> = vec![
            ("u8".into(), Value::U8(200)),
            ("i8".into(), Value::I8(-5)),
            ("u16".into(), Value::U16(60000)),
            ("i16".into(), Value::I16(-30000)),
            ("u32".into(), Value::U32(4_000_000_000)),
            ("i32".into(), Value::I32(-2_000_000_000)),
            ("f32".into(), Value::F32(1.5)),
            ("bool".into(), Value::Bool(true)),
            ("string".into(), Value::String("héllo".into())),
            ("u64".into(), Value::U64(u64::MAX)),
            ("i64".into(), Value::I64(i64::MIN)),
            ("f64".into(), Value::F64(-0.25)),
            ("general.alignment".into(), Value::U32(64)),
            ("a_u8".into(), Value::Array(Array::U8(vec![1, 2, 3]))),
            ("a_i8".into(), Value::Array(Array::I8(vec![-1, 2]))),
            ("a_u16".into(), Value::Array(Array::U16(vec![1, 65535]))),
            ("a_i16".into(), Value::Array(Array::I16(vec![-1, 7]))),
            ("a_u32".into(), Value::Array(Array::U32(vec![]))),
            ("a_i32".into(), Value::Array(Array::I32(vec![-9]))),
            ("a_f32".into(), Value::Array(Array::F32(vec![0.5, -2.0]))),
            (
                "a_bool".into(),
                Value::Array(Array::Bool(vec![true, false])),
            ),
            (
                "a_str".into(),
                Value::Array(Array::String(vec!["a".into(), "".into()])),
            ),
            ("a_u64".into(), Value::Array(Array::U64(vec![u64::MAX]))),
            ("a_i64".into(), Value::Array(Array::I64(vec![-1]))),
            ("a_f64".into(), Value::Array(Array::F64(vec![1e300]))),
            (
                "nested".into(),
                Value::Array(Array::Array(vec![
                    Array::U32(vec![1, 2]),
                    Array::String(vec!["x".into()]),
                    Array::Array(vec![Array::Bool(vec![false])]),
                ])),
            ),
        ];
        let tensors = vec![
            TensorDecl {
                name: "t0".into(),
                dims: vec![3, 5],
                ggml_type: GGML_TYPE_I8,
                bytes: 15,
            },
            TensorDecl {
                name: "t1".into(),
                dims: vec![7],
                ggml_type: GGML_TYPE_I8,
                bytes: 7,
            },
        ];
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("all.gguf");
        let mut w = GgufWriter::create(&path, &metadata, tensors).unwrap();
        w.write(&[1u8; 15]).unwrap();
        w.write(&[2u8; 7]).unwrap();
        w.finish().unwrap();

        let h = read_header(&path).unwrap();
        assert_eq!(h.metadata, metadata);
        assert_eq!(h.alignment, 64);
        assert_eq!(h.data_start % 64, 0);
        assert_eq!(h.tensors[0].offset, 0);
        assert_eq!(h.tensors[1].offset, 64);
        assert_eq!(h.tensors[1].dims, vec![7]);
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len() as u64, h.data_start + 64 + 7);
        let t1 = (h.data_start + 64) as usize;
        assert_eq!(&bytes[t1..], &[2u8; 7]);
        assert_eq!(
            &bytes[h.data_start as usize..h.data_start as usize + 15],
            &[1u8; 15]
        );
    }

    #[test]
    fn an_unfinished_writer_leaves_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.gguf");
        let decl = TensorDecl {
            name: "t".into(),
            dims: vec![4],
            ggml_type: GGML_TYPE_I8,
            bytes: 4,
        };
        let mut w = GgufWriter::create(&path, &[], vec![decl.clone()]).unwrap();
        w.write(&[0; 3]).unwrap();
        assert!(w.finish().is_err(), "short tensor");
        let w = GgufWriter::create(&path, &[], vec![decl]).unwrap();
        drop(w);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
