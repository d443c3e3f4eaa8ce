//! Tensor names of a Qwen4-Exp PLE table, whatever the converter's prefix.
//!
//! Every name is `<prefix>layers.<N>.ple.ple_embedding.<leaf>`, where the
//! prefix is empty or ends in `.` (transformers writes
//! `model.language_model.`, text-only checkpoints `model.`, mlx-vlm
//! `language_model.model.`) and the leaf is one of
//! - `ngram_embedding.weight` (one unsharded table), or
//!   `ngram_embedding.shard_{i}.weight` / `ngram_embedding.shards.{i}.weight`
//!   (a `split_ngram_parts` shard); MLX adds `.scales` and `.biases` beside
//!   each `.weight`;
//! - `ngram_embedding.weight_scale`: the FP8 release's one global scale;
//! - `layer_multipliers`, `ngram_heads_vocab_sizes`, `ngram_heads_offsets`:
//!   the hash constants transformers keeps as persistent buffers.

/// The stored array of a table (or shard) a name holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TableArray {
    /// `weight`: the values (MLX: the packed codes).
    Weight,
    /// `scales`: MLX per-group scales.
    Scales,
    /// `biases`: MLX per-group biases.
    Biases,
}

/// A hash constant stored beside the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Constant {
    /// `layer_multipliers`: one per n-gram position.
    Multipliers,
    /// `ngram_heads_vocab_sizes`: each head's prime.
    HeadPrimes,
    /// `ngram_heads_offsets`: each head's first row.
    HeadOffsets,
}

impl Constant {
    /// The leaf name the buffer is stored under.
    pub fn leaf(self) -> &'static str {
        match self {
            Constant::Multipliers => "layer_multipliers",
            Constant::HeadPrimes => "ngram_heads_vocab_sizes",
            Constant::HeadOffsets => "ngram_heads_offsets",
        }
    }
}

/// What a PLE tensor name says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PleTensor {
    /// A table array: `shard` is `None` for the unsharded table.
    Table {
        /// Shard index, if sharded.
        shard: Option<u32>,
        /// Which array.
        array: TableArray,
    },
    /// The FP8 table's global scale.
    WeightScale,
    /// A hash constant.
    Constant(Constant),
}

const MIDDLE: &str = ".ple.ple_embedding.";

/// Parses `name`: the zero-based decoder layer it belongs to and what it
/// holds, or `None` for a tensor that is not part of a PLE table.
pub fn parse(name: &str) -> Option<(u32, PleTensor)> {
    let at = name.find(MIDDLE)?;
    let layer = layer_before(&name[..at])?;
    let leaf = &name[at + MIDDLE.len()..];
    let tensor = match leaf {
        "layer_multipliers" => PleTensor::Constant(Constant::Multipliers),
        "ngram_heads_vocab_sizes" => PleTensor::Constant(Constant::HeadPrimes),
        "ngram_heads_offsets" => PleTensor::Constant(Constant::HeadOffsets),
        "ngram_embedding.weight_scale" => PleTensor::WeightScale,
        _ => table_leaf(leaf.strip_prefix("ngram_embedding.")?)?,
    };
    Some((layer, tensor))
}

/// `N` of a head ending in `layers.N`, preceded by nothing or a `.`.
fn layer_before(head: &str) -> Option<u32> {
    let digits_at = head.rfind("layers.")? + "layers.".len();
    let before = &head[..digits_at - "layers.".len()];
    if !(before.is_empty() || before.ends_with('.')) {
        return None;
    }
    number(&head[digits_at..])
}

fn table_leaf(leaf: &str) -> Option<PleTensor> {
    let (shard, array) = match leaf.split_once('.') {
        None => (None, leaf),
        Some((head, rest)) => {
            if let Some(i) = head.strip_prefix("shard_") {
                (Some(number(i)?), rest)
            } else if head == "shards" {
                let (i, array) = rest.split_once('.')?;
                (Some(number(i)?), array)
            } else {
                return None;
            }
        }
    };
    let array = match array {
        "weight" => TableArray::Weight,
        "scales" => TableArray::Scales,
        "biases" => TableArray::Biases,
        _ => return None,
    };
    Some(PleTensor::Table { shard, array })
}

/// A decimal number without sign or leading zeros (but `0` itself).
fn number(s: &str) -> Option<u32> {
    let ok =
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'));
    ok.then(|| s.parse().ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_converter_prefix_and_shard_spelling_parses() {
        let table = |shard, array| Some((1, PleTensor::Table { shard, array }));
        let w = TableArray::Weight;
        for (name, want) in [
            (
                "model.language_model.layers.1.ple.ple_embedding.ngram_embedding.shard_0.weight",
                table(Some(0), w),
            ),
            (
                "model.layers.1.ple.ple_embedding.ngram_embedding.shard_127.weight",
                table(Some(127), w),
            ),
            (
                "layers.1.ple.ple_embedding.ngram_embedding.weight",
                table(None, w),
            ),
            (
                "language_model.model.layers.1.ple.ple_embedding.ngram_embedding.shards.3.scales",
                table(Some(3), TableArray::Scales),
            ),
            (
                "language_model.model.layers.1.ple.ple_embedding.ngram_embedding.shards.3.biases",
                table(Some(3), TableArray::Biases),
            ),
            (
                "model.layers.1.ple.ple_embedding.ngram_embedding.weight_scale",
                Some((1, PleTensor::WeightScale)),
            ),
            (
                "model.layers.1.ple.ple_embedding.layer_multipliers",
                Some((1, PleTensor::Constant(Constant::Multipliers))),
            ),
            (
                "model.layers.1.ple.ple_embedding.ngram_heads_offsets",
                Some((1, PleTensor::Constant(Constant::HeadOffsets))),
            ),
        ] {
            assert_eq!(parse(name), want, "{name}");
        }
        for name in [
            "model.layers.1.mlp.weight",
            "model.sublayers.1.ple.ple_embedding.ngram_embedding.weight",
            "model.layers.01.ple.ple_embedding.ngram_embedding.weight",
            "model.layers.1.ple.ple_embedding.ngram_embedding.shard_x.weight",
            "model.layers.1.ple.ple_embedding.ngram_embedding.shard_1.bias",
            "model.layers.1.ple.ple_embedding.key_proj.weight",
        ] {
            assert_eq!(parse(name), None, "{name}");
        }
    }
}
