//! `engram_options`: how an engine reads and schedules, versioned by size.

use std::ffi::c_char;

use engram::hot::HotConfig;
use engram::io::threads::ReaderSched;
use engram::io::Backend;
use engram::open::EngineBuilder;
use engram::prefetch::{PrefillOrder, RowFormat};

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

/// `engram_options.readers`: ordinary time sharing (`SCHED_OTHER`), the
/// default.
pub const ENGRAM_READERS_NORMAL: u32 = 0;
/// `engram_options.readers`: `SCHED_BATCH` (Linux).
pub const ENGRAM_READERS_BATCH: u32 = 1;
/// `engram_options.readers`: nice -10 (needs `CAP_SYS_NICE`; falls back).
pub const ENGRAM_READERS_RAISED: u32 = 2;
/// `engram_options.readers`: `SCHED_FIFO` 1 (needs `CAP_SYS_NICE` or
/// `RLIMIT_RTPRIO`; falls back to raised).
pub const ENGRAM_READERS_REALTIME: u32 = 3;

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
    /// One of the `ENGRAM_READERS_*` values: the scheduling class of every
    /// reader thread but the hint threads, whose wake-up never preempts
    /// (default `ENGRAM_READERS_NORMAL`; ENGRAM_READERS).
    pub readers: u32,
    /// Prefill read batches in flight at once (default 2: the most urgent
    /// first, the others with the depth it leaves free): one per table while
    /// several tables have ring batches left, else consecutive batches of one.
    pub prefill_batches_in_flight: u32,
    /// Bytes per table of a prefill's reuse store (default 16 MiB; 0: no
    /// whole-prompt dedup; ENGRAM_REUSE_MIB).
    pub reuse_bytes: u64,
    /// Bounce memory of one batch call in bytes (default 16 MiB).
    pub max_batch_bytes: u64,
    /// Longest single read after coalescing, in bytes (default 128 KiB; at
    /// least 4 KiB and at most half of `max_batch_bytes`).
    pub max_read_bytes: u64,
    /// 1 (default): past a full ring and reuse store, advise the prompt's
    /// later rows into the page cache; 0: stop (ENGRAM_WARM). Off with
    /// direct I/O.
    pub warm_page_cache: u32,
    /// 1 (default): tell the kernel access is random (no readahead).
    pub advise_random: u32,
    /// Longest suffix n-gram the prompt-lookup predictor matches (default 3).
    pub lookup_max_ngram: u32,
    /// Tokens the prompt-lookup predictor proposes per step (default 2).
    pub lookup_tokens: u32,
    /// Hint batches queued at most; older ones are dropped (default 64).
    pub max_queued_hints: u32,
}

/// Sizes of earlier versions of `engram_options` that are still accepted:
/// the struct up to `cache_bytes` (before the hot tier), and up to
/// `prefill_order` (before `readers`).
const OLD_STRUCT_SIZES: [usize; 2] = [
    std::mem::offset_of!(engram_options, hot_path),
    std::mem::offset_of!(engram_options, readers),
];

/// Largest `struct_size` accepted: a bound on how far past the known fields
/// the zero check reads.
const MAX_STRUCT_SIZE: usize = 4096;

impl engram_options {
    /// The options of `builder`; `hot_path` NULL (a C string cannot
    /// borrow the builder's path: `engram_open` takes it as a field).
    fn of(builder: &EngineBuilder) -> engram_options {
        let (io, p) = (&builder.io, &builder.prefetch);
        engram_options {
            struct_size: std::mem::size_of::<engram_options>() as u32,
            backend: backend_code(io.backend),
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
            format: format_code(p.format),
            workers: p.workers as u32,
            decode_workers: p.decode_workers as u32,
            cache_bytes: builder.cache_bytes,
            hot_path: std::ptr::null(),
            hot_mlock: u32::from(builder.hot.mlock),
            prefill_order: code_of(p.prefill_order, PREFILL_ORDERS),
            readers: code_of(p.readers, READERS),
            prefill_batches_in_flight: p.prefill_batches_in_flight as u32,
            reuse_bytes: p.reuse_bytes,
            max_batch_bytes: io.max_batch_bytes as u64,
            max_read_bytes: io.max_read_bytes as u64,
            warm_page_cache: u32::from(p.warm_page_cache),
            advise_random: u32::from(io.advise_random),
            lookup_max_ngram: p.lookup_max_ngram as u32,
            lookup_tokens: p.lookup_tokens as u32,
            max_queued_hints: p.max_queued_hints as u32,
        }
    }

    /// The library defaults (the core's `EngineBuilder::default`; no
    /// environment read).
    pub(crate) fn defaults() -> engram_options {
        engram_options::of(&EngineBuilder::default())
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
        let mut builder = EngineBuilder::default();
        let io = &mut builder.io;
        io.backend = backend(self.backend)?;
        io.depth = self.io_depth as usize;
        io.direct = flag(self.direct_io, "direct_io")?;
        io.advise_random = flag(self.advise_random, "advise_random")?;
        io.max_batch_bytes = size(self.max_batch_bytes, "max_batch_bytes")?;
        io.max_read_bytes = size(self.max_read_bytes, "max_read_bytes")?;
        let p = &mut builder.prefetch;
        p.chunk_tokens = self.chunk_tokens;
        p.ring_chunks = self.ring_chunks;
        p.first_chunk_tokens = self.first_chunk_tokens;
        p.read_batch_tokens = self.read_batch_tokens;
        p.overlap_threshold = self.overlap_threshold;
        p.prefetch = flag(self.prefetch, "prefetch")?;
        p.pipeline = flag(self.pipeline, "pipeline")?;
        p.batch = flag(self.batch, "batch")?;
        p.lookup_hints = flag(self.lookup_hints, "lookup_hints")?;
        p.format = format(self.format, "options.format")?;
        p.workers = self.workers as usize;
        p.decode_workers = self.decode_workers as usize;
        p.prefill_order = one_of(self.prefill_order, "options.prefill_order", PREFILL_ORDERS)?;
        p.readers = one_of(self.readers, "options.readers", READERS)?;
        p.prefill_batches_in_flight = self.prefill_batches_in_flight as usize;
        p.reuse_bytes = self.reuse_bytes;
        p.warm_page_cache = flag(self.warm_page_cache, "warm_page_cache")?;
        p.lookup_max_ngram = self.lookup_max_ngram as usize;
        p.lookup_tokens = self.lookup_tokens as usize;
        p.max_queued_hints = self.max_queued_hints as usize;
        builder.cache_bytes = self.cache_bytes;
        // SAFETY: forwarded from this function's contract.
        builder.hot = unsafe { self.hot() }?;
        builder.validate()?;
        Ok(builder)
    }

    /// These options with the environment variables applied (the core's
    /// `EngineBuilder::apply_env`); `hot_path` kept as it is.
    ///
    /// # Safety
    /// As [`engram_options::builder`].
    unsafe fn with_env(&self) -> FfiResult<engram_options> {
        // SAFETY: forwarded from this function's contract.
        let mut builder = unsafe { self.builder() }?;
        builder.apply_env()?;
        Ok(engram_options {
            hot_path: self.hot_path,
            ..engram_options::of(&builder)
        })
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
        Ok(HotConfig::default()
            .with_path(path)
            .with_mlock(flag(self.hot_mlock, "hot_mlock")?))
    }
}

/// A byte count that fits this machine's `usize`.
fn size(value: u64, field: &str) -> FfiResult<usize> {
    usize::try_from(value)
        .map_err(|_| FfiError::invalid(format!("options.{field} = {value} is too large")))
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

/// `engram_options.readers`.
const READERS: &CEnum<ReaderSched> = &[
    (
        ENGRAM_READERS_NORMAL,
        "ENGRAM_READERS_NORMAL",
        ReaderSched::Normal,
    ),
    (
        ENGRAM_READERS_BATCH,
        "ENGRAM_READERS_BATCH",
        ReaderSched::Batch,
    ),
    (
        ENGRAM_READERS_RAISED,
        "ENGRAM_READERS_RAISED",
        ReaderSched::Raised,
    ),
    (
        ENGRAM_READERS_REALTIME,
        "ENGRAM_READERS_REALTIME",
        ReaderSched::Realtime,
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

/// A row format value (`ENGRAM_FORMAT_*`), `what` naming the argument.
pub(crate) fn format(value: u32, what: &str) -> FfiResult<RowFormat> {
    one_of(value, what, FORMATS)
}

/// The C constant of a row format.
pub(crate) fn format_code(format: RowFormat) -> u32 {
    code_of(format, FORMATS)
}

/// Fills `*options` with the library defaults and sets `struct_size`.
/// Reads no environment variable (`engram_options_apply_env` does).
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

/// Applies the environment variables ENGRAM_PREFETCH, ENGRAM_PIPELINE,
/// ENGRAM_BATCH, ENGRAM_WARM, ENGRAM_READERS, ENGRAM_PREFILL_ORDER and
/// ENGRAM_REUSE_MIB that are set to `*options` (filled before, e.g. by
/// `engram_options_default`). A value that does not parse is
/// `ENGRAM_INVALID_ARGUMENT` naming the variable and the value, and leaves
/// `*options` as it was; so are options that are not valid themselves.
///
/// # Safety
/// `options`, if not NULL, points at a readable and writable
/// `engram_options` whose `hot_path` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn engram_options_apply_env(options: *mut engram_options) -> engram_status {
    call("engram_options_apply_env", || {
        // SAFETY: forwarded from the caller's contract.
        let current = unsafe { engram_options::read(options) }?;
        // SAFETY: `hot_path` as the caller promises.
        let next = unsafe { current.with_env() }?;
        // Only the caller's own bytes are written back: an older caller's
        // struct is a prefix of this one.
        // SAFETY: `read` checked the pointer; its first 4 bytes are
        // struct_size.
        let size = unsafe { options.cast::<u32>().read() } as usize;
        let size = size.min(std::mem::size_of::<engram_options>());
        // SAFETY: the caller's struct is writable for `size` bytes, a
        // prefix of `next` that ends at a field boundary.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (&raw const next).cast::<u8>().add(4),
                options.cast::<u8>().add(4),
                size - 4,
            );
        }
        Ok(())
    })
}
