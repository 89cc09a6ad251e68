//! `--cfg loom` builds: no Redis client (loom models the allocator, and
//! the client's dependencies would only lengthen that build). The type is
//! empty, so nothing but `connect`, which refuses, can ever run.

use super::{RemoteConfig, RemoteStats};
use crate::entry::{SlotRange, SwapSlot};
use crate::target::WritebackTarget;
use std::io;

#[derive(Debug)]
pub enum RedisTarget {}

impl RedisTarget {
    pub fn connect(_: RemoteConfig, _: u64) -> Result<RedisTarget, String> {
        Err("built without the Redis client (--cfg loom)".into())
    }
    pub fn key(&self, _: u64) -> String {
        match *self {}
    }
    pub fn stats(&self) -> RemoteStats {
        match *self {}
    }
    pub fn clear(&self) {
        match *self {}
    }
    pub(crate) fn release(&self, _: SwapSlot, _: u64, _: &crate::device::DeviceAlloc) {
        match *self {}
    }
    pub(crate) fn flush_deletes(&self, _: &crate::device::DeviceAlloc) {
        match *self {}
    }
}

impl WritebackTarget for RedisTarget {
    fn kind(&self) -> &'static str {
        match *self {}
    }
    fn write(&self, _: SwapSlot, _: &[&[u8]]) -> io::Result<()> {
        match *self {}
    }
    fn read(&self, _: SwapSlot, _: &mut [u8]) -> io::Result<()> {
        match *self {}
    }
    fn read_runs(&self, _: &[SlotRange], _: &mut [u8]) -> io::Result<()> {
        match *self {}
    }
}
