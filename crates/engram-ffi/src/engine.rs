//! The engine handle: a model, its row source (and row cache), the reader
//! pool, and the registry of its sequences' stats.

use std::ffi::{c_char, c_void};
use std::path::PathBuf;
use std::sync::Arc;

use engram::codec::Encoding;
use engram::open::OpenEngine;
use engram::prefetch::RowFormat;

use crate::handles::{self, call_filling, call_on};
use crate::options::{
    self, engram_options, ENGRAM_ENCODING_BF16, ENGRAM_ENCODING_E4M3_E8M0_32_ROW264,
    ENGRAM_ENCODING_F16, ENGRAM_ENCODING_F32, ENGRAM_ENCODING_FP8_E4M3,
    ENGRAM_ENCODING_LLOYD4_E5M3_32_R136, ENGRAM_ENCODING_MLX4, ENGRAM_ENCODING_Q4_0,
    ENGRAM_ENCODING_Q4_1, ENGRAM_ENCODING_Q5_1, ENGRAM_ENCODING_Q8_0,
};
use crate::ptr::{c_str, slice_in, slice_out};
use crate::status::{call, engram_status, FfiError, FfiResult};
use crate::text::call_json;

/// An open model and its prefetch engine (opaque). Safe to use from any
/// number of threads at once.
#[allow(non_camel_case_types)]
pub struct engram_engine {
    _opaque: [u8; 0],
}

/// Facts about an engine, from `engram_engine_info`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(non_camel_case_types)]
pub struct engram_info {
    /// Engram tables (in layer order; table `t` is consumed by one layer).
    pub tables: u32,
    /// Rows per token of each table (hash heads times n-gram orders).
    pub rows_per_token: u32,
    /// Token ids accepted are `0..vocab_size`.
    pub vocab_size: u32,
    /// Values per decoded row (f32 format).
    pub row_dim: u32,
    /// Most tokens one prefill wait may cover (`chunk_tokens *
    /// ring_chunks`); with the pipeline off a wait may cover the whole prompt.
    pub max_wait_tokens: u32,
    /// `ENGRAM_FORMAT_*` the waits deliver.
    pub format: u32,
    /// `ENGRAM_BACKEND_*` actually used (never AUTO).
    pub backend: u32,
    /// 1 when the engine has a row cache.
    pub cached: u32,
}

/// One table of an engine, from `engram_table_info`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(non_camel_case_types)]
pub struct engram_table {
    /// Rows in the table.
    pub rows: u64,
    /// The transformer layer that consumes the table.
    pub layer_id: u32,
    /// Bytes of a row as stored (e.g. 264).
    pub stored_row_bytes: u32,
    /// Bytes of a row as waits deliver it in the engine's format.
    pub row_bytes: u32,
    /// `ENGRAM_ENCODING_*`: how the stored (raw) rows are encoded, for a
    /// caller that decodes raw rows itself (on a GPU, say). It sits in
    /// what was the struct's tail padding, so the size and the other
    /// fields' offsets are those of the header before it.
    pub encoding: u32,
}

/// The C handle's object: the core's opened engine (model, source, cache,
/// engine, stats registry) as built by [`engram::open::EngineBuilder`].
pub(crate) struct EngineObj(pub OpenEngine);

impl std::ops::Deref for EngineObj {
    type Target = OpenEngine;
    fn deref(&self) -> &OpenEngine {
        &self.0
    }
}

impl EngineObj {
    /// # Safety
    /// `options.hot_path` is NULL or a NUL-terminated string.
    unsafe fn open(path: PathBuf, options: &engram_options) -> FfiResult<EngineObj> {
        // SAFETY: forwarded from this function's contract.
        let builder = unsafe { options.builder() }?;
        Ok(EngineObj(builder.open(path)?))
    }

    fn check_table(&self, table: u32) -> FfiResult<usize> {
        Ok(self.0.check_table(table as usize)?)
    }

    fn info(&self) -> engram_info {
        let info = self.0.info();
        engram_info {
            tables: info.tables.len() as u32,
            rows_per_token: info.rows_per_token as u32,
            vocab_size: info.vocab_size as u32,
            row_dim: info.row_dim as u32,
            max_wait_tokens: info.max_wait_tokens,
            format: options::format_code(info.format),
            backend: options::backend_code(info.backend),
            cached: u32::from(info.cached),
        }
    }

    fn read_rows(&self, table: usize, ids: &[u32], format: RowFormat, out: &mut [u8]) -> FfiResult {
        let need = ids.len() * self.row_bytes(table, format);
        if out.len() < need {
            return Err(FfiError::new(
                engram_status::ENGRAM_BUFFER_TOO_SMALL,
                format!(
                    "out_len is {} bytes; {} rows need {need}",
                    out.len(),
                    ids.len()
                ),
            ));
        }
        Ok(self.0.read_rows(table, ids, format, out)?)
    }
}

#[cfg(unix)]
pub(crate) fn path_of(path: &std::ffi::CStr) -> FfiResult<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    Ok(PathBuf::from(std::ffi::OsStr::from_bytes(path.to_bytes())))
}

#[cfg(not(unix))]
pub(crate) fn path_of(path: &std::ffi::CStr) -> FfiResult<PathBuf> {
    path.to_str()
        .map(PathBuf::from)
        .map_err(|_| FfiError::invalid("path is not UTF-8"))
}

/// Opens the model at `path` (a ds4 `.gguf` file or a Hugging Face
/// checkpoint directory) and starts an engine on it. `options` may be NULL
/// for the defaults. On success `*engine` is the new handle; on failure it
/// is set to NULL.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string; `options` is NULL or points
/// at `options->struct_size` readable bytes, whose `hot_path` (if the size
/// covers it) is NULL or a NUL-terminated string; `engine` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn engram_open(
    path: *const c_char,
    options: *const engram_options,
    engine: *mut *mut engram_engine,
) -> engram_status {
    call("engram_open", || {
        // SAFETY: forwarded from the caller's contract.
        unsafe { handles::clear_out(engine, "engine") }?;
        // SAFETY: forwarded from the caller's contract.
        let path = path_of(unsafe { c_str(path, "path") }?)?;
        let options = if options.is_null() {
            engram_options::defaults()
        } else {
            // SAFETY: forwarded from the caller's contract.
            unsafe { engram_options::read(options) }?
        };
        // SAFETY: `hot_path` is NULL or a string, per the caller's contract
        // (the defaults have it NULL).
        let obj = Arc::new(unsafe { EngineObj::open(path, &options) }?);
        let handle = handles::fresh();
        // SAFETY: forwarded from the caller's contract.
        unsafe { handles::hand_out(engine, "engine", handle, obj) }
    })
}

/// Closes an engine. NULL is accepted and does nothing; a handle already
/// closed is refused with `ENGRAM_INVALID_HANDLE`. The reader threads stop
/// and are joined; sequences still open stay valid handles whose calls
/// return `ENGRAM_CANCELLED` and must still be freed. Rows handed out by
/// waits on those sequences stay readable until the sequence (or prefill)
/// is freed.
///
/// # Safety
/// None: the handle is looked up, not dereferenced.
#[no_mangle]
pub unsafe extern "C" fn engram_close(engine: *mut engram_engine) -> engram_status {
    call("engram_close", || {
        // Dropping the share joins the readers unless another thread is
        // mid-call.
        drop(handles::take::<EngineObj, _>(engine)?);
        Ok(())
    })
}

/// Fills `*info` with facts about the engine.
///
/// # Safety
/// `info` is NULL or points at a writable `engram_info`.
#[no_mangle]
pub unsafe extern "C" fn engram_engine_info(
    engine: *mut engram_engine,
    info: *mut engram_info,
) -> engram_status {
    // SAFETY: forwarded from the caller's contract.
    unsafe {
        call_filling("engram_engine_info", engine, info, "info", |obj| {
            Ok(obj.info())
        })
    }
}

/// `engram_table.encoding` of a row encoding.
fn encoding_code(encoding: Encoding) -> u32 {
    match encoding {
        Encoding::E4m3E8m0Row264 => ENGRAM_ENCODING_E4M3_E8M0_32_ROW264,
        Encoding::Lloyd4E5m3Row136 => ENGRAM_ENCODING_LLOYD4_E5M3_32_R136,
        Encoding::Bf16 { .. } => ENGRAM_ENCODING_BF16,
        Encoding::F16 { .. } => ENGRAM_ENCODING_F16,
        Encoding::F32 { .. } => ENGRAM_ENCODING_F32,
        Encoding::Fp8E4m3 { .. } => ENGRAM_ENCODING_FP8_E4M3,
        Encoding::Q8_0 { .. } => ENGRAM_ENCODING_Q8_0,
        Encoding::Q5_1 { .. } => ENGRAM_ENCODING_Q5_1,
        Encoding::Q4_0 { .. } => ENGRAM_ENCODING_Q4_0,
        Encoding::Q4_1 { .. } => ENGRAM_ENCODING_Q4_1,
        Encoding::Mlx4 { .. } => ENGRAM_ENCODING_MLX4,
    }
}

/// Fills `*out` with facts about table `table` of the engine.
///
/// # Safety
/// `out` is NULL or points at a writable `engram_table`.
#[no_mangle]
pub unsafe extern "C" fn engram_table_info(
    engine: *mut engram_engine,
    table: u32,
    out: *mut engram_table,
) -> engram_status {
    let facts = |obj: Arc<EngineObj>| {
        let t = obj.table_info(table as usize)?;
        Ok(engram_table {
            rows: t.rows,
            layer_id: t.layer_id,
            stored_row_bytes: t.stored_row_bytes as u32,
            row_bytes: t.row_bytes as u32,
            encoding: encoding_code(t.encoding),
        })
    };
    // SAFETY: forwarded from the caller's contract.
    unsafe { call_filling("engram_table_info", engine, out, "out", facts) }
}

/// Reads rows `ids[0..n]` of `table` synchronously into `out` (row `i` at
/// `i * row_bytes`), in `format` (`ENGRAM_FORMAT_RAW` or
/// `ENGRAM_FORMAT_F32`, whatever the engine's format). For checks and
/// tools: it does not go through the prefetch schedule. `out_len` must be
/// at least `n * row_bytes` (`ENGRAM_BUFFER_TOO_SMALL` otherwise). A row id
/// outside the table is `ENGRAM_INVALID_ARGUMENT`.
///
/// # Safety
/// `ids` is NULL or points at `n` readable ids; `out` is NULL or points at
/// `out_len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn engram_rows_read(
    engine: *mut engram_engine,
    table: u32,
    ids: *const u32,
    n: usize,
    format: u32,
    out: *mut c_void,
    out_len: usize,
) -> engram_status {
    call_on("engram_rows_read", engine, |obj| {
        let t = obj.check_table(table)?;
        let format = options::format(format, "format")?;
        // SAFETY: forwarded from the caller's contract.
        let ids = unsafe { slice_in(ids, n, "ids") }?;
        // SAFETY: forwarded from the caller's contract.
        let out = unsafe { slice_out(out.cast::<u8>(), out_len, "out") }?;
        obj.read_rows(t, ids, format, out)
    })
}

/// Sets `*json` to a JSON document of the engine's stats: backend, row
/// cache, totals over all its sequences (open and freed) per phase and
/// table, and each open sequence's full stats plus the last few freed
/// ones'. Free it with `engram_string_free`.
///
/// # Safety
/// `json` is NULL or points at a writable `char *`.
#[no_mangle]
pub unsafe extern "C" fn engram_stats_json(
    engine: *mut engram_engine,
    json: *mut *mut c_char,
) -> engram_status {
    let document = |obj: &EngineObj| Ok(obj.stats_json());
    // SAFETY: forwarded from the caller's contract.
    unsafe { call_json("engram_stats_json", engine, json, document) }
}
