//! SES headers: the standard request (44 B) and the response (12 B).
//!
//! Standard request:
//! ```text
//!  0 opcode (6 bits) | version (2)      1 flags: DC 0x20 IE 0x10 REL 0x08 HD 0x04 EOM 0x02 SOM 0x01
//!  2 message ID (u16)                   4 resource index generation (u8)
//!  5 job ID (24 bits)                   8 PIDonFEP (12 bits) | resource index (12 bits)
//! 11 reserved                          12 buffer offset (u64): this packet's byte offset in the message
//! 20 initiator (u32)                   24 match bits / memory key (u64)
//! 32 header data (u64) with HD on SOM, else payload length (14 bits) | message offset (u32)
//! 40 request length (u32): the whole message's length
//! ```
//! Every packet of a message carries the match bits and the request length,
//! so whichever packet arrives first can start the message at the receiver.
//!
//! Response: `opcode | return code | message ID | job ID (24) | reserved |
//! modified length (u32)`.

use super::{be16, be32, be64, put16, put32, put64, WireError};

pub const VERSION: u8 = 0;

/// SES opcodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SesOpcode {
    Write = 1,
    Read = 2,
    Atomic = 3,
    FetchingAtomic = 4,
    Send = 5,
    RendezvousSend = 6,
    DeferrableSend = 8,
    TaggedSend = 9,
    RendezvousTaggedSend = 0x0A,
    DeferrableTaggedSend = 0x0B,
    MessageError = 0x0F,
    /// Response opcode: the message was delivered (or discarded) at the target.
    Response = 0x10,
    /// Data returned for a read (the target's response with data).
    ReadResponse = 0x11,
}

impl SesOpcode {
    pub fn from_u8(v: u8) -> Result<Self, WireError> {
        use SesOpcode::*;
        Ok(match v {
            1 => Write,
            2 => Read,
            3 => Atomic,
            4 => FetchingAtomic,
            5 => Send,
            6 => RendezvousSend,
            8 => DeferrableSend,
            9 => TaggedSend,
            0x0A => RendezvousTaggedSend,
            0x0B => DeferrableTaggedSend,
            0x0F => MessageError,
            0x10 => Response,
            0x11 => ReadResponse,
            other => return Err(WireError::UnknownOpcode(other)),
        })
    }
}

/// SES request flags.
pub mod flags {
    pub const DC: u8 = 0x20;
    pub const IE: u8 = 0x10;
    pub const REL: u8 = 0x08;
    pub const HD: u8 = 0x04;
    pub const EOM: u8 = 0x02;
    pub const SOM: u8 = 0x01;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SesRequestRepr {
    pub opcode: u8,
    pub flags: u8,
    pub message_id: u16,
    pub ri_generation: u8,
    pub job_id: u32,
    pub pid_on_fep: u16,
    pub resource_index: u16,
    pub buffer_offset: u64,
    pub initiator: u32,
    pub match_bits: u64,
    /// Header data on SOM with HD; otherwise payload length (low 14 bits of
    /// the upper half) and message offset (lower half).
    pub header_data: u64,
    pub request_length: u32,
}

impl SesRequestRepr {
    pub const LEN: usize = 44;

    pub fn opcode(&self) -> Result<SesOpcode, WireError> {
        SesOpcode::from_u8(self.opcode)
    }

    pub fn parse(b: &[u8]) -> Result<Self, WireError> {
        if b.len() < Self::LEN {
            return Err(WireError::Truncated);
        }
        if b[0] & 0x3 != VERSION {
            return Err(WireError::Malformed);
        }
        let r = SesRequestRepr {
            opcode: b[0] >> 2,
            flags: b[1],
            message_id: be16(b, 2),
            ri_generation: b[4],
            job_id: be32(b, 4) & 0x00ff_ffff,
            pid_on_fep: ((b[8] as u16) << 4) | (b[9] >> 4) as u16,
            resource_index: (((b[9] & 0xf) as u16) << 8) | b[10] as u16,
            buffer_offset: be64(b, 12),
            initiator: be32(b, 20),
            match_bits: be64(b, 24),
            header_data: be64(b, 32),
            request_length: be32(b, 40),
        };
        r.opcode()?;
        Ok(r)
    }

    pub fn emit(&self, b: &mut [u8]) {
        b[0] = (self.opcode << 2) | VERSION;
        b[1] = self.flags;
        put16(b, 2, self.message_id);
        put32(b, 4, self.job_id & 0x00ff_ffff);
        b[4] = self.ri_generation;
        b[8] = (self.pid_on_fep >> 4) as u8;
        b[9] = (((self.pid_on_fep & 0xf) as u8) << 4) | ((self.resource_index >> 8) & 0xf) as u8;
        b[10] = self.resource_index as u8;
        b[11] = 0;
        put64(b, 12, self.buffer_offset);
        put32(b, 20, self.initiator);
        put64(b, 24, self.match_bits);
        put64(b, 32, self.header_data);
        put32(b, 40, self.request_length);
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SesResponseRepr {
    pub opcode: u8,
    pub return_code: u8,
    pub message_id: u16,
    pub job_id: u32,
    pub modified_length: u32,
}

impl SesResponseRepr {
    pub const LEN: usize = 12;

    pub fn parse(b: &[u8]) -> Result<Self, WireError> {
        if b.len() < Self::LEN {
            return Err(WireError::Truncated);
        }
        let r = SesResponseRepr {
            opcode: b[0] >> 2,
            return_code: b[1],
            message_id: be16(b, 2),
            job_id: be32(b, 4) >> 8,
            modified_length: be32(b, 8),
        };
        if SesOpcode::from_u8(r.opcode)? != SesOpcode::Response {
            return Err(WireError::Malformed);
        }
        Ok(r)
    }

    pub fn emit(&self, b: &mut [u8]) {
        b[0] = (self.opcode << 2) | VERSION;
        b[1] = self.return_code;
        put16(b, 2, self.message_id);
        put32(b, 4, (self.job_id & 0x00ff_ffff) << 8);
        put32(b, 8, self.modified_length);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_round_trip() {
        let r = SesRequestRepr {
            opcode: SesOpcode::TaggedSend as u8,
            flags: flags::SOM | flags::HD | flags::DC,
            message_id: 0xfffe,
            ri_generation: 7,
            job_id: 0x12_3456,
            pid_on_fep: 0xabc,
            resource_index: 0xdef,
            buffer_offset: 1 << 40,
            initiator: 0xcafe,
            match_bits: u64::MAX - 1,
            header_data: 0x0102_0304_0506_0708,
            request_length: 256 << 20,
        };
        let mut b = [0u8; SesRequestRepr::LEN];
        r.emit(&mut b);
        assert_eq!(SesRequestRepr::parse(&b), Ok(r));
        assert_eq!(SesRequestRepr::parse(&b[..43]), Err(WireError::Truncated));
    }

    #[test]
    fn response_round_trip() {
        let r = SesResponseRepr {
            opcode: SesOpcode::Response as u8,
            return_code: 0,
            message_id: 3,
            job_id: 0x65_4321,
            modified_length: 4096,
        };
        let mut b = [0u8; SesResponseRepr::LEN];
        r.emit(&mut b);
        assert_eq!(SesResponseRepr::parse(&b), Ok(r));
    }

    #[test]
    fn unknown_opcode_rejected() {
        let mut b = [0u8; SesRequestRepr::LEN];
        b[0] = 0x3f << 2;
        assert_eq!(
            SesRequestRepr::parse(&b),
            Err(WireError::UnknownOpcode(0x3f))
        );
    }
}
