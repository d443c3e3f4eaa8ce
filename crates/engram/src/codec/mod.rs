//! Row encodings: decode to BF16-rounded f32 or raw bytes, encode and transcode.

/// Values per Engram row.
pub const ROW_DIM: usize = 256;

/// Values that share one scale byte.
pub const GROUP: usize = 32;

/// How a table's rows are encoded on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// `e4m3_e8m0_32_row264`: 256 E4M3 bytes then 8 E8M0 scale bytes.
    E4m3E8m0Row264,
    /// `lloyd4_e5m3_32_r136`: 128 bytes of sign+3-bit Lloyd level nibbles
    /// (low nibble first), then 8 E5M3 scale bytes.
    Lloyd4E5m3Row136,
}

impl Encoding {
    /// Every encoding this crate reads.
    pub const ALL: [Encoding; 2] = [Encoding::E4m3E8m0Row264, Encoding::Lloyd4E5m3Row136];

    /// The name model files use for this encoding.
    pub fn name(self) -> &'static str {
        match self {
            Encoding::E4m3E8m0Row264 => "e4m3_e8m0_32_row264",
            Encoding::Lloyd4E5m3Row136 => "lloyd4_e5m3_32_r136",
        }
    }

    /// Parses a name as written in model files.
    pub fn from_name(name: &str) -> Option<Encoding> {
        Encoding::ALL.into_iter().find(|e| e.name() == name)
    }

    /// Bytes per row on disk.
    pub fn row_bytes(self) -> usize {
        match self {
            Encoding::E4m3E8m0Row264 => ROW_DIM + ROW_DIM / GROUP,
            Encoding::Lloyd4E5m3Row136 => ROW_DIM / 2 + ROW_DIM / GROUP,
        }
    }
}

impl std::fmt::Display for Encoding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
