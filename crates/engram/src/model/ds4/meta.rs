//! Typed access to the Engram keys of one dialect: each key under the
//! dialect's own prefix first, then under `deepseek4.` (files repaired after
//! the 2026-09 converter bug), with errors naming the key found.

use std::path::Path;

use super::Dialect;
use crate::codec::Encoding;
use crate::model::checks;
use crate::model::gguf::{Array, GgufHeader, Value};
use crate::{Error, Result};

/// Typed access to the Engram keys of one dialect.
pub(super) struct Meta<'a> {
    pub(super) header: &'a GgufHeader,
    pub(super) path: &'a Path,
    pub(super) dialect: Dialect,
}

impl Meta<'_> {
    pub(super) fn key(&self, name: &str) -> String {
        format!("{}.engram.{name}", self.dialect.name())
    }

    /// The value and the key it was found under (own prefix, then `deepseek4.`).
    pub(super) fn find(&self, name: &str) -> Option<(String, &Value)> {
        let own = self.key(name);
        if let Some(v) = self.header.get(&own) {
            return Some((own, v));
        }
        let legacy = format!("deepseek4.engram.{name}");
        self.header.get(&legacy).map(|v| (legacy, v))
    }

    pub(super) fn missing(&self, name: &str) -> Error {
        Error::format(self.path, self.key(name), "missing metadata key")
    }

    pub(super) fn int(&self, name: &str) -> Result<Option<u64>> {
        let Some((key, v)) = self.find(name) else {
            return Ok(None);
        };
        v.as_u64().map(Some).ok_or_else(|| {
            Error::format(
                self.path,
                key,
                format!(
                    "expected a non-negative integer, found {:?}",
                    v.value_type()
                ),
            )
        })
    }

    pub(super) fn req_int(&self, name: &str) -> Result<u64> {
        self.int(name)?.ok_or_else(|| self.missing(name))
    }

    pub(super) fn ints(&self, name: &str) -> Result<Option<Vec<u64>>> {
        let Some((key, v)) = self.find(name) else {
            return Ok(None);
        };
        let bad = |what: String| Error::format(self.path, &key, what);
        let arr: &Array = v.as_array().ok_or_else(|| {
            bad(format!(
                "expected an integer array, found {:?}",
                v.value_type()
            ))
        })?;
        arr.to_u64_vec().map(Some).ok_or_else(|| {
            bad(format!(
                "expected non-negative integers, found {:?} elements",
                arr.element_type()
            ))
        })
    }

    pub(super) fn req_ints(&self, name: &str) -> Result<Vec<u64>> {
        self.ints(name)?.ok_or_else(|| self.missing(name))
    }

    /// A u32-valued array of exactly `len` elements.
    pub(super) fn u32s(&self, name: &str, values: Vec<u64>, len: usize) -> Result<Vec<u32>> {
        if values.len() != len {
            return Err(self.bad(
                name,
                format!("has {} elements, expected {len}", values.len()),
            ));
        }
        values
            .into_iter()
            .map(|v| u32::try_from(v).map_err(|_| self.bad(name, format!("value {v} exceeds u32"))))
            .collect()
    }

    pub(super) fn bad(&self, name: &str, reason: impl Into<String>) -> Error {
        let key = self
            .find(name)
            .map(|(k, _)| k)
            .unwrap_or_else(|| self.key(name));
        Error::format(self.path, key, reason)
    }

    /// The declared encoding; `None` when the dialect leaves it to the row width.
    pub(super) fn encoding(&self) -> Result<Option<Encoding>> {
        let Some((key, v)) = self.find("encoding") else {
            return match self.dialect {
                Dialect::Deepseek41 => Err(self.missing("encoding")),
                Dialect::Deepseek4 => Ok(None),
            };
        };
        let name = v
            .as_str()
            .ok_or_else(|| Error::format(self.path, &key, "expected a string"))?;
        Encoding::from_name(name).map(Some).ok_or_else(|| {
            Error::format(
                self.path,
                &key,
                format!("unknown encoding {name:?} (a conversion left unfinished?)"),
            )
        })
    }

    pub(super) fn layer_ids(&self) -> Result<Vec<u32>> {
        let ids = self.req_ints("layer_ids")?;
        if ids.is_empty() || ids.len() > checks::MAX_TABLES {
            return Err(self.bad(
                "layer_ids",
                format!("{} tables (expected 1..={})", ids.len(), checks::MAX_TABLES),
            ));
        }
        let n = ids.len();
        self.u32s("layer_ids", ids, n)
    }

    pub(super) fn token_map(&self) -> Result<Option<Vec<u32>>> {
        let Some(v) = self.ints("token_map")? else {
            return Ok(None);
        };
        let n = v.len();
        self.u32s("token_map", v, n).map(Some)
    }
}
