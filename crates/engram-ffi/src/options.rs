//! `engram_options`: how an engine reads and schedules, versioned by size.

use std::ffi::c_char;

use engram::hot::HotConfig;
use engram::io::{Backend, IoConfig};
use engram::open::EngineBuilder;
use engram::prefetch::{PrefetchConfig, PrefillOrder, RowFormat};

use crate::ptr::write_out;
use crate::status::{call, engram_status, FfiError, FfiResult};

/// `engram_options.backend`: the platform's best (io_uring for direct I/O
/// on Linux when allowed, else the pread pool).
pub const ENGRAM_BACKEND_AUTO: u32 = 0;
/// `engram_options.backend`: a persistent pool of pread threads.
pub const ENGRAM_BACKEND_PSYNC: u32 = 1;
/// `engram_options.backend`: io_uring (Linux only).
pub const ENGRAM_BACKEND_URING: u32 = 2;
/// `engram_options.backend`: lazy mmap, rows copied out (the baseline).
pub const ENGRAM_BACKEND_MMAP: u32 = 3;

/// `engram_options.prefill_order`: learned from the waits (the lower table
/// first until the consumer waits on another; right for a layer sweep).
pub const ENGRAM_PREFILL_ORDER_AUTO: u32 = 0;
/// `engram_options.prefill_order`: the runtime takes each prefill chunk
/// through all layers before the next; rows are read chunk by chunk.
pub const ENGRAM_PREFILL_ORDER_CHUNK: u32 = 1;

/// Row format: the bytes as stored (`row_bytes` per row, e.g. 264).
pub const ENGRAM_FORMAT_RAW: u32 = 0;
/// Row format: decoded to f32, `row_dim` native-endian floats per row
/// (DeepSeek encodings rounded to BF16, as the model consumes them; the
/// Qwen4-Exp encodings exactly, as each format defines its values).
pub const ENGRAM_FORMAT_F32: u32 = 1;

/// `engram_table.encoding`: `e4m3_e8m0_32_row264`, 256 E4M3 codes then 8
/// E8M0 scales (one per 32 values); a value is code x 2^(scale - 127),
/// rounded to BF16.
pub const ENGRAM_ENCODING_E4M3_E8M0_32_ROW264: u32 = 1;
/// `engram_table.encoding`: `lloyd4_e5m3_32_r136`, 128 bytes of sign +
/// 3-bit Lloyd level nibbles (low nibble first), then 8 E5M3 scales.
pub const ENGRAM_ENCODING_LLOYD4_E5M3_32_R136: u32 = 2;
/// `engram_table.encoding`: `bf16`, `row_dim` little-endian BF16 values.
pub const ENGRAM_ENCODING_BF16: u32 = 3;
/// `engram_table.encoding`: `f16`, `row_dim` little-endian IEEE half values.
pub const ENGRAM_ENCODING_F16: u32 = 4;
/// `engram_table.encoding`: `f32`, `row_dim` little-endian f32 values.
pub const ENGRAM_ENCODING_F32: u32 = 5;
/// `engram_table.encoding`: `fp8_e4m3`, `row_dim` float8_e4m3fn codes; a
/// value is code x the table's one scale, which `ENGRAM_FORMAT_F32` rows
/// have applied.
pub const ENGRAM_ENCODING_FP8_E4M3: u32 = 6;
/// `engram_table.encoding`: ggml `q8_0`, per 32 values an f16 scale and 32
/// signed bytes.
pub const ENGRAM_ENCODING_Q8_0: u32 = 7;
/// `engram_table.encoding`: ggml `q5_1`, per 32 values f16 d, f16 m, 32
/// fifth bits and 16 nibble bytes.
pub const ENGRAM_ENCODING_Q5_1: u32 = 8;
/// `engram_table.encoding`: ggml `q4_0`, per 32 values an f16 scale and 16
/// nibble bytes.
pub const ENGRAM_ENCODING_Q4_0: u32 = 9;
/// `engram_table.encoding`: ggml `q4_1`, per 32 values f16 d, f16 m and 16
/// nibble bytes.
pub const ENGRAM_ENCODING_Q4_1: u32 = 10;
/// `engram_table.encoding`: `mlx4`, MLX affine 4-bit in groups of 32: the
/// codes (`row_dim / 8` u32 words, lowest nibble first), then `row_dim /
/// 32` bf16 scales, then as many bf16 biases; value = code x scale + bias.
pub const ENGRAM_ENCODING_MLX4: u32 = 11;

/// Options of `engram_open`. Fill with
/// `engram_options_default`, then change fields.
///
/// Versioned by `struct_size`: a caller built against a newer header with
/// more fields is accepted as long as the fields this library does not know
/// are zero; fields are only ever appended, and a caller built against an
/// older header (a smaller size that ends at a field boundary this library
/// knows: 72 bytes before the hot tier) gets the defaults for the rest.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub struct engram_options {
    /// `sizeof(engram_options)` as the caller compiled it.
    pub struct_size: u32,
    /// One of the `ENGRAM_BACKEND_*` values.
    pub backend: u32,
    /// 1: bypass the page cache (`O_DIRECT` on Linux, `F_NOCACHE` on macOS).
    pub direct_io: u32,
    /// Reads in flight: pread threads or io_uring queue depth (1..=4096).
    pub io_depth: u32,
    /// Prefill ring chunk, in tokens (default 1024).
    pub chunk_tokens: u32,
    /// Chunks in a table's ring: a wait covers at most
    /// `chunk_tokens * ring_chunks` tokens (default 2).
    pub ring_chunks: u32,
    /// Tokens in a prefill's first read batch (default 128).
    pub first_chunk_tokens: u32,
    /// Tokens per later read batch (default 256).
    pub read_batch_tokens: u32,
    /// Prompts shorter than this are read at the wait, synchronously
    /// (default 1024; 0 overlaps every prefill).
    pub overlap_threshold: u32,
    /// 1: read ahead of the consumer; 0 reads at the wait (ENGRAM_PREFETCH).
    pub prefetch: u32,
    /// 1: chunked prefill pipeline; 0 reads whole tables (ENGRAM_PIPELINE).
    pub pipeline: u32,
    /// 1: batched reads; 0 one request per row (ENGRAM_BATCH).
    pub batch: u32,
    /// 1: prompt-lookup hints after each decode step (default 0).
    pub lookup_hints: u32,
    /// `ENGRAM_FORMAT_RAW` or `ENGRAM_FORMAT_F32`: rows handed out by waits.
    pub format: u32,
    /// Reader threads for prefill and hints (default 4).
    pub workers: u32,
    /// Reader threads for decode steps only (default 2).
    pub decode_workers: u32,
    /// Row cache budget in bytes shared by the engine's sequences; 0: no
    /// row cache.
    pub cache_bytes: u64,
    /// Hot-row file (NUL-terminated path, made by `engram profile` from
    /// this model) loaded at open and served before the row cache and
    /// storage; NULL: no hot tier. Read during `engram_open` only.
    pub hot_path: *const c_char,
    /// 1: `mlock` the hot rows (fails when `RLIMIT_MEMLOCK` is too low).
    pub hot_mlock: u32,
    /// `ENGRAM_PREFILL_ORDER_AUTO` (0, the default; a field older callers
    /// left zero as reserved) or `ENGRAM_PREFILL_ORDER_CHUNK`: how the
    /// runtime's prefill goes through the tables (ENGRAM_PREFILL_ORDER).
    pub prefill_order: u32,
}

/// Sizes of earlier versions of `engram_options` that are still accepted:
/// the struct up to `cache_bytes` (before the hot tier).
const OLD_STRUCT_SIZES: [usize; 1] = [std::mem::offset_of!(engram_options, hot_path)];

/// Largest `struct_size` accepted: a bound on how far past the known fields
/// the zero check reads.
const MAX_STRUCT_SIZE: usize = 4096;

impl engram_options {
    /// The defaults, with the ENGRAM_PREFETCH / ENGRAM_PIPELINE /
    /// ENGRAM_BATCH environment switches applied.
    pub(crate) fn defaults() -> engram_options {
        let io = IoConfig::default();
        let p = PrefetchConfig::from_env();
        engram_options {
            struct_size: std::mem::size_of::<engram_options>() as u32,
            backend: ENGRAM_BACKEND_AUTO,
            direct_io: u32::from(io.direct),
            io_depth: io.depth as u32,
            chunk_tokens: p.chunk_tokens,
            ring_chunks: p.ring_chunks,
            first_chunk_tokens: p.first_chunk_tokens,
            read_batch_tokens: p.read_batch_tokens,
            overlap_threshold: p.overlap_threshold,
            prefetch: u32::from(p.prefetch),
            pipeline: u32::from(p.pipeline),
            batch: u32::from(p.batch),
            lookup_hints: u32::from(p.lookup_hints),
            format: ENGRAM_FORMAT_RAW,
            workers: p.workers as u32,
            decode_workers: p.decode_workers as u32,
            cache_bytes: 0,
            hot_path: std::ptr::null(),
            hot_mlock: 0,
            prefill_order: code_of(p.prefill_order, PREFILL_ORDERS),
        }
    }

    /// Reads the caller's options: checks `struct_size`, copies the known
    /// fields and checks that unknown trailing fields are zero.
    ///
    /// # Safety
    /// `p` points at `struct_size` readable bytes (its first field).
    pub(crate) unsafe fn read(p: *const engram_options) -> FfiResult<engram_options> {
        crate::ptr::check_out(p.cast_mut(), "options")?;
        // SAFETY: non-NULL and aligned; the first 4 bytes are struct_size.
        let size = unsafe { p.cast::<u32>().read() } as usize;
        let known = std::mem::size_of::<engram_options>();
        if OLD_STRUCT_SIZES.contains(&size) {
            let mut options = engram_options::defaults();
            // SAFETY: the caller's struct is `size` bytes, a prefix of ours
            // that ends at a field boundary; every field is plain data.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    p.cast::<u8>(),
                    (&raw mut options).cast::<u8>(),
                    size,
                );
            }
            options.struct_size = known as u32;
            return Ok(options);
        }
        if size < known || size > MAX_STRUCT_SIZE {
            return Err(FfiError::invalid(format!(
                "options.struct_size is {size}; expected {known} (call engram_options_default first)"
            )));
        }
        // SAFETY: the caller's struct is `size` >= `known` bytes.
        let tail = unsafe { std::slice::from_raw_parts(p.cast::<u8>().add(known), size - known) };
        if tail.iter().any(|&b| b != 0) {
            return Err(FfiError::invalid(format!(
                "options set fields past byte {known} that this library version does not know"
            )));
        }
        // SAFETY: `known` bytes readable; every field is a plain integer.
        Ok(unsafe { p.read() })
    }

    /// The engine options these ask for, validated.
    ///
    /// # Safety
    /// `hot_path` is NULL or a NUL-terminated string (as `engram_open`'s
    /// caller promises, and as the defaults have it).
    pub(crate) unsafe fn builder(&self) -> FfiResult<EngineBuilder> {
        let builder = EngineBuilder {
            io: IoConfig {
                backend: backend(self.backend)?,
                depth: self.io_depth as usize,
                direct: flag(self.direct_io, "direct_io")?,
                ..IoConfig::default()
            },
            prefetch: PrefetchConfig {
                chunk_tokens: self.chunk_tokens,
                ring_chunks: self.ring_chunks,
                first_chunk_tokens: self.first_chunk_tokens,
                read_batch_tokens: self.read_batch_tokens,
                overlap_threshold: self.overlap_threshold,
                prefetch: flag(self.prefetch, "prefetch")?,
                pipeline: flag(self.pipeline, "pipeline")?,
                batch: flag(self.batch, "batch")?,
                lookup_hints: flag(self.lookup_hints, "lookup_hints")?,
                format: format(self.format, "options.format")?,
                workers: self.workers as usize,
                decode_workers: self.decode_workers as usize,
                prefill_order: prefill_order(self.prefill_order)?,
                ..PrefetchConfig::default()
            },
            cache_bytes: self.cache_bytes,
            // SAFETY: forwarded from this function's contract.
            hot: unsafe { self.hot() }?,
            faults: None,
        };
        builder.validate()?;
        Ok(builder)
    }

    /// The hot-tier options.
    ///
    /// # Safety
    /// `hot_path` is NULL or a NUL-terminated string.
    pub(crate) unsafe fn hot(&self) -> FfiResult<HotConfig> {
        let path = if self.hot_path.is_null() {
            None
        } else {
            // SAFETY: non-NULL and NUL-terminated per the caller.
            let s = unsafe { crate::ptr::c_str(self.hot_path, "options.hot_path") }?;
            Some(crate::engine::path_of(s)?)
        };
        Ok(HotConfig {
            path,
            mlock: flag(self.hot_mlock, "hot_mlock")?,
        })
    }
}

fn flag(value: u32, field: &str) -> FfiResult<bool> {
    match value {
        0 => Ok(false),
        1 => Ok(true),
        v => Err(FfiError::invalid(format!(
            "options.{field} must be 0 or 1 (got {v})"
        ))),
    }
}

/// A C enum: each constant, its name in the header, and the value it stands
/// for; read both ways ([`one_of`], [`code_of`]).
type CEnum<T> = [(u32, &'static str, T)];

/// `engram_options.backend`.
const BACKENDS: &CEnum<Backend> = &[
    (ENGRAM_BACKEND_AUTO, "ENGRAM_BACKEND_AUTO", Backend::Auto),
    (ENGRAM_BACKEND_PSYNC, "ENGRAM_BACKEND_PSYNC", Backend::Psync),
    (ENGRAM_BACKEND_URING, "ENGRAM_BACKEND_URING", Backend::Uring),
    (ENGRAM_BACKEND_MMAP, "ENGRAM_BACKEND_MMAP", Backend::Mmap),
];

/// `engram_options.prefill_order`.
const PREFILL_ORDERS: &CEnum<PrefillOrder> = &[
    (
        ENGRAM_PREFILL_ORDER_AUTO,
        "ENGRAM_PREFILL_ORDER_AUTO",
        PrefillOrder::Auto,
    ),
    (
        ENGRAM_PREFILL_ORDER_CHUNK,
        "ENGRAM_PREFILL_ORDER_CHUNK",
        PrefillOrder::Chunk,
    ),
];

/// Row formats (`ENGRAM_FORMAT_*`).
const FORMATS: &CEnum<RowFormat> = &[
    (ENGRAM_FORMAT_RAW, "ENGRAM_FORMAT_RAW", RowFormat::Raw),
    (ENGRAM_FORMAT_F32, "ENGRAM_FORMAT_F32", RowFormat::F32),
];

/// The value of the C constant `value` among `choices`, or an error naming
/// `what` and the constants it takes.
fn one_of<T: Copy>(value: u32, what: &str, choices: &CEnum<T>) -> FfiResult<T> {
    if let Some(&(_, _, v)) = choices.iter().find(|(code, _, _)| *code == value) {
        return Ok(v);
    }
    let names: Vec<String> = choices
        .iter()
        .map(|(code, name, _)| format!("{name} ({code})"))
        .collect();
    Err(FfiError::invalid(format!(
        "{what} {value} is not one of {}",
        names.join(", ")
    )))
}

/// The C constant of `value` in `choices` (every value has one).
fn code_of<T: PartialEq>(value: T, choices: &CEnum<T>) -> u32 {
    choices
        .iter()
        .find(|(_, _, v)| *v == value)
        .map_or(0, |&(code, _, _)| code)
}

fn backend(value: u32) -> FfiResult<Backend> {
    one_of(value, "options.backend", BACKENDS)
}

/// The C constant of a backend.
pub(crate) fn backend_code(backend: Backend) -> u32 {
    code_of(backend, BACKENDS)
}

fn prefill_order(value: u32) -> FfiResult<PrefillOrder> {
    one_of(value, "options.prefill_order", PREFILL_ORDERS)
}

/// A row format value (`ENGRAM_FORMAT_*`), `what` naming the argument.
pub(crate) fn format(value: u32, what: &str) -> FfiResult<RowFormat> {
    one_of(value, what, FORMATS)
}

/// The C constant of a row format.
pub(crate) fn format_code(format: RowFormat) -> u32 {
    code_of(format, FORMATS)
}

/// Fills `*options` with the defaults (ENGRAM_PREFETCH, ENGRAM_PIPELINE and
/// ENGRAM_BATCH from the environment applied) and sets `struct_size`.
///
/// # Safety
/// `options`, if not NULL, points at a writable `engram_options`.
#[no_mangle]
pub unsafe extern "C" fn engram_options_default(options: *mut engram_options) -> engram_status {
    call("engram_options_default", || {
        // SAFETY: forwarded from the caller's contract.
        unsafe { write_out(options, "options", engram_options::defaults()) }
    })
}
