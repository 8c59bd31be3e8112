//! Fuzz target bodies, shared by the cargo-fuzz targets in `fuzz/` and by
//! the corpus replay test (`provider/tests/fuzz_corpus.rs`), so a crash the
//! fuzzer found once stays a regression test that runs without cargo-fuzz.
//!
//! Each function takes arbitrary bytes and panics only on a bug.

use std::net::SocketAddr;

use crate::wire::{
    ack, control, nack, prologue, rendezvous, request, ses, AckRepr, ControlRepr, NackRepr,
    PlainAckRepr, Prologue, RendezvousRepr, RequestRepr, SesRequestRepr, SesResponseRepr,
};
use crate::{CompletionLevel, Config, Engine, Payload, ProbeFlags, RecvOp, SendOp};

/// Names of the targets, as used for `fuzz/fuzz_targets/<name>.rs` and
/// `fuzz/corpus/<name>/`.
pub const TARGETS: [&str; 2] = ["wire_parse", "engine_datagram"];

/// Run the target called `name` on `data`; false for an unknown name.
pub fn run(name: &str, data: &[u8]) -> bool {
    match name {
        "wire_parse" => wire_parse(data),
        "engine_datagram" => engine_datagram(data),
        _ => return false,
    }
    true
}

/// Parse `data` as every header at every plausible position; whatever
/// parses must emit back to bytes that parse to the same value, and every
/// accessor of a checked view must be readable.
pub fn wire_parse(data: &[u8]) {
    // The headers of a data packet follow one another; try each offset a
    // header can start at.
    for at in [0, RequestRepr::LEN, RequestRepr::LEN + SesRequestRepr::LEN] {
        let b = data.get(at..).unwrap_or(&[]);
        round_trip(b, Prologue::parse, |r, o| r.emit(o), |_| Prologue::LEN);
        round_trip(
            b,
            RequestRepr::parse,
            |r, o| r.emit(o),
            |_| RequestRepr::LEN,
        );
        round_trip(b, AckRepr::parse, |r, o| r.emit(o), |_| AckRepr::LEN);
        round_trip(
            b,
            PlainAckRepr::parse,
            |r, o| r.emit(o),
            |_| PlainAckRepr::LEN,
        );
        round_trip(b, NackRepr::parse, |r, o| r.emit(o), |_| NackRepr::LEN);
        round_trip(
            b,
            ControlRepr::parse,
            |r, o| r.emit(o),
            |_| ControlRepr::LEN,
        );
        round_trip(
            b,
            SesRequestRepr::parse,
            |r, o| r.emit(o),
            |_| SesRequestRepr::LEN,
        );
        round_trip(
            b,
            SesResponseRepr::parse,
            |r, o| r.emit(o),
            |_| SesResponseRepr::LEN,
        );
        round_trip(
            b,
            RendezvousRepr::parse,
            |r, o| r.emit(o),
            RendezvousRepr::wire_len,
        );
        read_views(b);
    }
}

fn round_trip<R: PartialEq + std::fmt::Debug, E>(
    b: &[u8],
    parse: impl Fn(&[u8]) -> Result<R, E>,
    emit: impl Fn(&R, &mut [u8]),
    wire_len: impl Fn(&R) -> usize,
) {
    let Ok(r) = parse(b) else {
        return;
    };
    let len = wire_len(&r);
    assert!(b.len() >= len, "parsed from {} bytes, needs {len}", b.len());
    let mut out = vec![0u8; len];
    emit(&r, &mut out);
    match parse(&out) {
        Ok(again) => assert_eq!(again, r, "emit/parse changed the value"),
        Err(_) => panic!("emitted header does not parse: {r:?}"),
    }
}

/// Every accessor of every view that `new_checked` accepts.
fn read_views(b: &[u8]) {
    let mut sink = 0u64;
    if let Ok(p) = prologue::Packet::new_checked(b) {
        sink ^= (p.packet_type() ^ p.next_header() ^ p.flags()) as u64;
    }
    if let Ok(p) = request::Packet::new_checked(b) {
        sink ^= p.psn() as u64 ^ p.spdcid() as u64 ^ p.dpdcid() as u64;
        sink ^= p.clear_psn_offset() as u64 ^ p.after_header().len() as u64;
        sink ^= p.prologue().flags() as u64;
    }
    if let Ok(p) = ack::Packet::new_checked(b) {
        sink ^= p.cack_psn() as u64 ^ p.sack_bitmap() ^ p.ack_psn_offset() as u64;
        sink ^= p.spdcid() as u64 ^ p.dpdcid() as u64 ^ p.mpr() as u64;
        sink ^= (p.cc_type() ^ p.cc_flags()) as u64 ^ p.sack_offset() as u64;
    }
    if let Ok(p) = ack::CcPacket::new_checked(b) {
        sink ^= p.service_time() as u64 ^ p.rcvd_bytes() as u64 ^ p.ooo_count() as u64;
        sink ^= p.restore_cwnd() as u64 ^ p.rcv_cwnd_pend() as u64 ^ p.ack().cack_psn() as u64;
    }
    if let Ok(p) = nack::Packet::new_checked(b) {
        sink ^= (p.code() ^ p.vendor_code()) as u64 ^ p.psn() as u64 ^ p.payload() as u64;
        sink ^= p.spdcid() as u64 ^ p.dpdcid() as u64;
    }
    if let Ok(p) = control::Packet::new_checked(b) {
        sink ^= (p.packet_type() ^ p.control_type() ^ p.flags()) as u64;
        sink ^= p.probe_opaque() as u64 ^ p.psn() as u64 ^ p.payload() as u64;
        sink ^= p.spdcid() as u64 ^ p.dpdcid() as u64;
    }
    if let Ok(p) = ses::RequestPacket::new_checked(b) {
        sink ^= (p.opcode() ^ p.version() ^ p.flags() ^ p.ri_generation()) as u64;
        sink ^= p.message_id() as u64 ^ p.job_id() as u64 ^ p.pid_on_fep() as u64;
        sink ^= p.resource_index() as u64 ^ p.buffer_offset() ^ p.initiator() as u64;
        sink ^= p.match_bits() ^ p.header_data() ^ p.request_length() as u64;
    }
    if let Ok(p) = ses::ResponsePacket::new_checked(b) {
        sink ^= (p.opcode() ^ p.version() ^ p.return_code()) as u64;
        sink ^= p.message_id() as u64 ^ p.job_id() as u64 ^ p.modified_length() as u64;
    }
    if let Ok(p) = rendezvous::Packet::new_checked(b) {
        sink ^= p.eager_length() as u64 ^ p.ri_generation() as u64 ^ p.pid_on_fep() as u64;
        sink ^= p.resource_index() as u64 ^ p.read_address() ^ p.read_key();
        sink ^= p.read_length() as u64;
    }
    std::hint::black_box(sink);
}

/// Two engines, A sending to B. After a few valid exchanges (contexts
/// established, a message delivered, another in flight), the input drives
/// a sequence of events, each introduced by one byte whose low two bits say
/// what it is:
///
/// * `0`: a raw datagram: `len` (u8) then `len` bytes, delivered to B
///   (bit 2 clear) or A (set), from the other engine's address (bit 3
///   clear) or a stranger's (set); the high 4 bits pick the IP TOS byte it
///   arrives with from [`FUZZ_TOS`] (ECN marks, trimmed DSCPs);
/// * `1`: a mutated copy of a recorded valid datagram: index (u8), position
///   (u8), XOR value (u8); bits 2 and 3 as above;
/// * `2`: the clock advances by ((low 5 bits of the next byte) + 1) x 50 µs,
///   shifted left by its high 3 bits (50 µs to 205 ms); both engines handle
///   their timers;
/// * `3`: both engines exchange what they have to send (a bounded number of
///   datagrams); bit 2 set: post another send first; bit 3 set: the fabric
///   loses everything sent this time.
///
/// The end runs the clock until both engines are quiet (bounded).
/// TOS bytes an injected datagram may arrive with: plain, each ECN
/// codepoint, the trimmed DSCPs with and without CE, and a few others.
pub const FUZZ_TOS: [u8; 16] = [
    0x00, 0x01, 0x02, 0x03, 0x2C, 0x2E, 0x2F, 0x3C, 0x3E, 0x3F, 0xB8, 0xBA, 0xBB, 0x2D, 0x3D, 0xFF,
];

pub fn engine_datagram(data: &[u8]) {
    let mut h = Harness::new();
    h.setup();
    let mut input = data;
    while let Some((&op, rest)) = input.split_first() {
        input = rest;
        let to_a = op & 4 != 0;
        let stranger = op & 8 != 0;
        let tos = FUZZ_TOS[(op >> 4) as usize];
        match op & 3 {
            0 => {
                let Some((&len, rest)) = input.split_first() else {
                    break;
                };
                let len = (len as usize).min(rest.len());
                let (dgram, rest) = rest.split_at(len);
                input = rest;
                h.inject(to_a, stranger, tos, dgram);
            }
            1 => {
                let [idx, pos, xor, ..] = *input else {
                    break;
                };
                input = &input[3..];
                if h.recorded.is_empty() {
                    continue;
                }
                let mut dgram = h.recorded[idx as usize % h.recorded.len()].clone();
                if !dgram.is_empty() {
                    let at = pos as usize % dgram.len();
                    dgram[at] ^= xor;
                }
                h.inject(to_a, stranger, tos, &dgram);
            }
            2 => {
                let Some((&ticks, rest)) = input.split_first() else {
                    break;
                };
                input = rest;
                h.now += (((ticks as u64 & 0x1f) + 1) * 50_000) << (ticks >> 5);
                h.a.handle_timeout(h.now);
                h.b.handle_timeout(h.now);
            }
            _ => {
                if to_a {
                    h.post_send(2000);
                }
                if stranger {
                    h.lose_all();
                } else {
                    h.exchange(64);
                }
            }
        }
        h.drain_completions();
    }
    h.settle();
}

struct Harness {
    a: Engine,
    b: Engine,
    a_addr: SocketAddr,
    b_addr: SocketAddr,
    stranger: SocketAddr,
    now: u64,
    buf: Vec<u8>,
    /// Valid datagrams seen during setup, for mutation.
    recorded: Vec<Vec<u8>>,
    next_context: u64,
}

impl Harness {
    fn new() -> Harness {
        let config = Config {
            // Small packets so a short message spans several PSNs.
            mtu: 512,
            ..Config::default()
        };
        let a_addr = SocketAddr::from(([127, 0, 0, 1], 40001));
        let b_addr = SocketAddr::from(([127, 0, 0, 1], 40002));
        Harness {
            a: Engine::new(&config, a_addr, 1),
            b: Engine::new(&config, b_addr, 2),
            a_addr,
            b_addr,
            stranger: SocketAddr::from(([127, 0, 0, 1], 40003)),
            now: 1_000_000,
            buf: vec![0u8; 65536],
            recorded: Vec::new(),
            next_context: 1,
        }
    }

    fn post_send(&mut self, len: usize) {
        let context = self.next_context;
        self.next_context += 1;
        let payload: Vec<u8> = (0..len).map(|i| (i as u64 ^ context) as u8).collect();
        let _ = self.a.post_send(
            self.now,
            SendOp {
                dest: self.b_addr,
                payload: Payload::Owned(payload),
                tag: (context & 1 == 0).then_some(context),
                cq_data: Some(context),
                context,
                level: if context % 3 == 2 {
                    CompletionLevel::Delivery
                } else {
                    CompletionLevel::Transmit
                },
                signal: true,
            },
        );
    }

    fn post_recv(&mut self, len: usize, tagged: bool) {
        let context = self.next_context;
        self.next_context += 1;
        let _ = self.b.post_recv(
            self.now,
            RecvOp {
                src: None,
                tagged,
                tag: 0,
                ignore: u64::MAX,
                buffer: Box::new(vec![0u8; len]),
                context,
                signal: true,
                probe: ProbeFlags::default(),
            },
        );
    }

    /// Establish both directions' contexts: one message delivered and
    /// acknowledged, a second one half way.
    fn setup(&mut self) {
        self.post_recv(4096, false);
        self.post_recv(4096, true);
        self.post_send(1500);
        self.exchange(64);
        self.post_send(3000);
        self.post_send(100);
        // Let some packets of the second message out, not all of its ACKs back.
        self.exchange(4);
        self.drain_completions();
    }

    fn inject(&mut self, to_a: bool, stranger: bool, tos: u8, dgram: &[u8]) {
        let (engine, from) = if to_a {
            (
                &mut self.a,
                if stranger { self.stranger } else { self.b_addr },
            )
        } else {
            (
                &mut self.b,
                if stranger { self.stranger } else { self.a_addr },
            )
        };
        engine.handle_datagram(self.now, from, tos, dgram);
    }

    /// Move up to `max` datagrams each way, recording them.
    fn exchange(&mut self, max: usize) {
        for _ in 0..max {
            let mut moved = false;
            if let Some(t) = self.a.poll_transmit(self.now, &mut self.buf) {
                let d = self.buf[..t.len].to_vec();
                if t.dest == self.b_addr {
                    self.b.handle_datagram(self.now, self.a_addr, 0, &d);
                }
                self.record(d);
                moved = true;
            }
            if let Some(t) = self.b.poll_transmit(self.now, &mut self.buf) {
                let d = self.buf[..t.len].to_vec();
                if t.dest == self.a_addr {
                    self.a.handle_datagram(self.now, self.b_addr, 0, &d);
                }
                self.record(d);
                moved = true;
            }
            if !moved {
                break;
            }
        }
    }

    /// Take everything both engines want to send and drop it.
    fn lose_all(&mut self) {
        for _ in 0..256 {
            let a = self.a.poll_transmit(self.now, &mut self.buf).is_some();
            let b = self.b.poll_transmit(self.now, &mut self.buf).is_some();
            if !a && !b {
                break;
            }
        }
    }

    fn record(&mut self, d: Vec<u8>) {
        if self.recorded.len() < 64 {
            self.recorded.push(d);
        }
    }

    fn drain_completions(&mut self) {
        while self.a.poll_completion().is_some() {}
        while self.b.poll_completion().is_some() {}
    }

    /// Run timers and exchanges until both engines are quiet or a bound is hit.
    fn settle(&mut self) {
        for _ in 0..200 {
            self.exchange(256);
            self.drain_completions();
            let next = match (self.a.next_timeout(), self.b.next_timeout()) {
                (Some(x), Some(y)) => x.min(y),
                (x, y) => match x.or(y) {
                    Some(t) => t,
                    None => return,
                },
            };
            self.now = self.now.max(next);
            self.a.handle_timeout(self.now);
            self.b.handle_timeout(self.now);
        }
    }
}

/// Inputs worth starting from, per target: valid packets of every type,
/// truncated and garbage ones, and event sequences that reach retransmission,
/// peer failure and mutated replays. `provider/tests/fuzz_corpus.rs` replays
/// them and (ignored test `write_seed_corpus`) writes them to
/// `fuzz/corpus/<target>/seed-*`.
pub fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    match target {
        "wire_parse" => wire_seeds(),
        "engine_datagram" => engine_seeds(),
        _ => Vec::new(),
    }
}

fn wire_seeds() -> Vec<(String, Vec<u8>)> {
    use crate::wire::prologue::flags as pflags;
    use crate::wire::ses::flags as sflags;
    use crate::wire::{ControlType, NackCode, NextHeader, PacketType, SesOpcode};
    let mut out: Vec<(String, Vec<u8>)> = Vec::new();
    let req = RequestRepr {
        ptype: PacketType::RudRequest,
        next: NextHeader::SesRequest,
        flags: pflags::SYN | pflags::AR,
        clear_psn_offset: 0,
        psn: 0x1234_5678,
        spdcid: 7,
        dpdcid: 3,
    };
    let ses_req = SesRequestRepr {
        opcode: SesOpcode::TaggedSend as u8,
        flags: sflags::SOM | sflags::EOM | sflags::HD | sflags::DC,
        message_id: 1,
        match_bits: 0xfeed,
        header_data: 42,
        request_length: 8,
        ..SesRequestRepr::default()
    };
    let mut data = vec![0u8; RequestRepr::LEN + SesRequestRepr::LEN + 8];
    req.emit(&mut data);
    ses_req.emit(&mut data[RequestRepr::LEN..]);
    out.push(("data".into(), data.clone()));
    out.push((
        "data-truncated".into(),
        data[..RequestRepr::LEN + 20].to_vec(),
    ));
    let mut rndv = vec![0u8; RequestRepr::LEN + SesRequestRepr::LEN + RendezvousRepr::LEN];
    req.emit(&mut rndv);
    SesRequestRepr {
        opcode: SesOpcode::RendezvousSend as u8,
        request_length: 1 << 20,
        ..ses_req
    }
    .emit(&mut rndv[RequestRepr::LEN..]);
    RendezvousRepr {
        eager_length: 4096,
        read_address: 0x7f00_0000_0000,
        read_key: 9,
        read_length: (1 << 20) - 4096,
        ..RendezvousRepr::default()
    }
    .emit(&mut rndv[RequestRepr::LEN + SesRequestRepr::LEN..]);
    out.push(("rendezvous".into(), rndv));
    let mut resp = vec![0u8; RequestRepr::LEN + SesResponseRepr::LEN];
    RequestRepr {
        next: NextHeader::SesResponse,
        ..req
    }
    .emit(&mut resp);
    SesResponseRepr {
        opcode: SesOpcode::Response as u8,
        message_id: 1,
        modified_length: 8,
        ..SesResponseRepr::default()
    }
    .emit(&mut resp[RequestRepr::LEN..]);
    out.push(("response".into(), resp));
    let ack = AckRepr {
        cack_psn: 0x1234_5678,
        spdcid: 3,
        dpdcid: 7,
        sack_bitmap: 0b1011,
        mpr: 32,
        rcvd_bytes: 0x10,
        ..AckRepr::default()
    };
    let mut b = vec![0u8; AckRepr::LEN];
    ack.emit(&mut b);
    out.push(("ack-cc".into(), b.clone()));
    out.push(("ack-cc-truncated".into(), b[..AckRepr::LEN - 1].to_vec()));
    let mut b = vec![0u8; PlainAckRepr::LEN];
    ack.plain().emit(&mut b);
    out.push(("ack-plain".into(), b));
    for code in NackCode::ALL {
        let mut b = vec![0u8; NackRepr::LEN];
        NackRepr {
            flags: 0,
            code,
            vendor_code: 0,
            psn: 5,
            spdcid: 3,
            dpdcid: 7,
            payload: 0,
        }
        .emit(&mut b);
        out.push((format!("nack-{:02x}", code as u8), b));
    }
    for t in ControlType::ALL {
        let mut b = vec![0u8; ControlRepr::LEN];
        ControlRepr {
            ctl_type: t,
            flags: 0,
            probe_opaque: 1,
            psn: 5,
            spdcid: 7,
            dpdcid: 3,
            payload: 0,
        }
        .emit(&mut b);
        out.push((format!("control-{}", t as u8), b));
    }
    out.push(("empty".into(), Vec::new()));
    out.push(("one-byte".into(), vec![0x10]));
    out.push((
        "garbage".into(),
        (0..64u8).map(|i| i.wrapping_mul(37)).collect(),
    ));
    out.push(("all-ones".into(), vec![0xff; 100]));
    out
}

fn engine_seeds() -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = vec![
        ("nothing".into(), Vec::new()),
        ("exchange".into(), vec![3]),
        ("send-more".into(), vec![7, 7, 3, 3]),
        // Everything lost, then timers: retransmissions, backoff, failure.
        (
            "loss-then-rto".into(),
            [vec![7, 11], [2, 0xff].repeat(40)].concat(),
        ),
        ("loss-recover".into(), vec![11, 2, 0x10, 3, 2, 0x40, 3]),
        // A stranger's datagram and a truncated request.
        ("stranger".into(), vec![8, 4, 0x10, 0x80, 0, 0]),
        (
            "raw-to-a".into(),
            vec![4, 16, 0x40, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 2, 0, 0],
        ),
    ];
    // Replays of every recorded datagram, unchanged and with a flipped byte
    // in the prologue, the PSN, the PDC IDs and the SES header.
    for idx in 0..16u8 {
        out.push((format!("replay-{idx}"), vec![1, idx, 0, 0, 5, idx, 0, 0]));
        for pos in [0u8, 1, 5, 9, 11, 12, 14, 20, 52] {
            out.push((
                format!("mutate-{idx}-{pos}"),
                vec![1, idx, pos, 0x41, 3, 1, idx, pos, 0x80],
            ));
        }
    }
    out
}
