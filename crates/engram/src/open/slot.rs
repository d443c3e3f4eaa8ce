//! The one prefill a [`SharedSequence`](super::SharedSequence) may have
//! live, named by the id the binding handed out for it.

use crate::prefetch::Prefill;

/// The one prefill that may be live on a binding's sequence, named by the
/// id the binding handed out for it (a C handle, a Python object's number).
/// A call naming a prefill that has ended finds nothing here, so the
/// binding refuses it instead of serving it from freed rings.
///
/// A [`SharedSequence`](super::SharedSequence) keeps one beside its
/// [`Sequence`](crate::prefetch::Sequence), under the sequence's lock, and
/// declares it before the sequence so a live prefill ends (cancels and joins
/// its readers) before the sequence drops.
pub struct PrefillSlot<Id> {
    live: Option<(Id, Prefill<'static>)>,
}

impl<Id> Default for PrefillSlot<Id> {
    fn default() -> Self {
        PrefillSlot { live: None }
    }
}

impl<Id: Copy + PartialEq> PrefillSlot<Id> {
    /// The id of the live prefill, if one is live.
    pub fn live(&self) -> Option<Id> {
        self.live.as_ref().map(|(id, _)| *id)
    }

    /// Makes `prefill` the live one, named `id`. A prefill still live is
    /// ended first; the bindings refuse a second prefill before this.
    pub fn start(&mut self, id: Id, prefill: Prefill<'static>) {
        self.live = Some((id, prefill));
    }

    /// The live prefill if it is the one named `id`.
    pub fn get(&mut self, id: Id) -> Option<&mut Prefill<'static>> {
        self.live
            .as_mut()
            .filter(|(live, _)| *live == id)
            .map(|(_, prefill)| prefill)
    }

    /// Ends the live prefill (cancels and joins its readers) if it is the
    /// one named `id`; nothing if that one has already ended.
    pub fn end(&mut self, id: Id) {
        if self.live() == Some(id) {
            self.live = None;
        }
    }

    /// Takes the live prefill out, whichever it is, with its id: the
    /// caller ends it by dropping it.
    pub fn take(&mut self) -> Option<(Id, Prefill<'static>)> {
        self.live.take()
    }
}
