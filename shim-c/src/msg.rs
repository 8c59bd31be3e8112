//! being written
