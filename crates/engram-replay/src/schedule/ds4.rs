//! `ds4`: the peer's published prefill and decode schedule and its read path.

use std::time::Duration;

use engram::{Error, Result};

use super::{IoCounters, PrefillRun, Schedule, ScheduleSetup};

/// The peer's schedule.
pub struct Ds4Schedule {}

impl Ds4Schedule {
    /// A fresh run over `setup`'s model.
    pub fn new(setup: &ScheduleSetup<'_>) -> Result<Ds4Schedule> {
        let _ = setup;
        Err(Error::InvalidArgument(
            "the ds4 schedule is not built yet".into(),
        ))
    }
}

impl Schedule for Ds4Schedule {
    fn name(&self) -> &'static str {
        "ds4"
    }
    fn prefill<'a>(&'a mut self, _tokens: &[u32]) -> Result<Box<dyn PrefillRun + 'a>> {
        Err(Error::InvalidArgument("not built".into()))
    }
    fn step_begin(&mut self, _token: u32, _stall: &mut [Duration]) -> Result<()> {
        Ok(())
    }
    fn step_wait(&mut self, _table: usize, _rows: Option<&mut Vec<f32>>) -> Result<Duration> {
        Ok(Duration::ZERO)
    }
    fn hint(&mut self, _tokens: &[u32]) -> Result<()> {
        Ok(())
    }
    fn io(&mut self) -> IoCounters {
        IoCounters::default()
    }
}
