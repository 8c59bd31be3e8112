//! emu-net
