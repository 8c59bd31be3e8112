//! `emu-fake-host`: a stand-in for `uet_matrix` that tests the runner and
//! the relay without the provider. It speaks the runner's file protocol
//! (see fabtests/matrix/uet_matrix.c) and moves each flow with a toy
//! transport through the relay: UET-shaped data packets (RUD request
//! prologue, flow id and sequence in the PSN slots) in a window of 32,
//! one ACK per packet, the trimmed ones answered with a NACK flag and sent
//! again, and everything unacknowledged re-sent after 5 ms of silence.
//! It is not a congestion controller; its numbers mean nothing.

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use uet::wire::ip::{self, Ecn};
use uet::wire::{NextHeader, PacketType, Prologue, RelayHeader};

const MTU: usize = 4096;
const PAYLOAD: usize = MTU - 56;
const WINDOW: u32 = 32;

struct Flow {
    id: u32,
    src: usize,
    dst: usize,
    packets: u32,
    start_ns: u64,
    after: Vec<usize>,
    // sender state
    posted: bool,
    next: u32,
    acked: BTreeSet<u32>,
    resend: Vec<u32>,
    t_start: u64,
    // receiver state
    got: BTreeSet<u32>,
    done: bool,
    t_done: u64,
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_nanos() as u64
}

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn put(dir: &Path, name: &str, text: &str) -> std::io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    fs::write(&tmp, text)?;
    fs::rename(tmp, dir.join(name))
}

fn packet(ptype: PacketType, flags: u8, flow: u32, seq: u32, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; RelayHeader::LEN + len];
    let next = if ptype == PacketType::RudRequest {
        NextHeader::SesRequest
    } else {
        NextHeader::None
    };
    let u = &mut b[RelayHeader::LEN..];
    Prologue { ptype, next, flags }.emit(u);
    u[4..8].copy_from_slice(&flow.to_be_bytes());
    u[8..12].copy_from_slice(&seq.to_be_bytes());
    b
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().collect();
    let me: usize = arg(&args, "--host")
        .and_then(|v| v.parse().ok())
        .ok_or("--host")?;
    let n: usize = arg(&args, "--hosts")
        .and_then(|v| v.parse().ok())
        .ok_or("--hosts")?;
    let flows_file = PathBuf::from(arg(&args, "--flows").ok_or("--flows")?);
    let dir = PathBuf::from(arg(&args, "--dir").ok_or("--dir")?);
    let timeout = Duration::from_secs(
        arg(&args, "--timeout")
            .and_then(|v| v.parse().ok())
            .unwrap_or(30),
    );
    let ip: std::net::IpAddr = std::env::var("FI_UET_SRC_ADDR")
        .map_err(|_| "FI_UET_SRC_ADDR")?
        .parse()
        .map_err(|e| format!("FI_UET_SRC_ADDR: {e}"))?;
    let relay: SocketAddr = std::env::var("FI_UET_FABRIC")
        .map_err(|_| "FI_UET_FABRIC")?
        .parse()
        .map_err(|e| format!("FI_UET_FABRIC: {e}"))?;

    let mut flows = Vec::new();
    for line in fs::read_to_string(&flows_file)
        .map_err(|e| e.to_string())?
        .lines()
    {
        let w: Vec<u64> = line
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        if w.len() < 6 {
            continue;
        }
        flows.push(Flow {
            id: w[0] as u32,
            src: w[1] as usize,
            dst: w[2] as usize,
            packets: w[3].div_ceil(PAYLOAD as u64) as u32,
            start_ns: w[4],
            after: w[6..].iter().map(|&d| d as usize).collect(),
            posted: false,
            next: 0,
            acked: BTreeSet::new(),
            resend: Vec::new(),
            t_start: 0,
            got: BTreeSet::new(),
            done: false,
            t_done: 0,
        });
    }

    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None)
        .map_err(|e| e.to_string())?;
    s.set_tos(ip::tos(0, Ecn::Ect0) as u32)
        .map_err(|e| e.to_string())?;
    s.bind(&SocketAddr::new(ip, 0).into())
        .map_err(|e| e.to_string())?;
    let sock: UdpSocket = s.into();
    nix::sys::socket::setsockopt(&sock, nix::sys::socket::sockopt::IpRecvTos, &true)
        .map_err(|e| e.to_string())?;
    sock.set_read_timeout(Some(Duration::from_micros(200)))
        .map_err(|e| e.to_string())?;
    let mine = sock.local_addr().map_err(|e| e.to_string())?;
    put(&dir, &format!("addr.{me}"), &format!("{mine}\n")).map_err(|e| e.to_string())?;

    let t0 = Instant::now();
    let mut peers = Vec::new();
    for h in 0..n {
        loop {
            if let Ok(t) = fs::read_to_string(dir.join(format!("addr.{h}"))) {
                if let Ok(a) = t.trim().parse::<SocketAddr>() {
                    peers.push(a);
                    break;
                }
            }
            if t0.elapsed() > timeout {
                return Err(format!("no address from host {h}"));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let host_of: HashMap<SocketAddr, usize> =
        peers.iter().enumerate().map(|(i, a)| (*a, i)).collect();
    put(&dir, &format!("ready.{me}"), "1\n").map_err(|e| e.to_string())?;
    let go: u64 = loop {
        if let Ok(t) = fs::read_to_string(dir.join("go")) {
            if let Ok(g) = t.trim().parse() {
                break g;
            }
        }
        if t0.elapsed() > timeout {
            return Err("no go".into());
        }
        std::thread::sleep(Duration::from_millis(1));
    };

    let mut buf = vec![0u8; 70_000];
    let mut cmsg = nix::cmsg_space!(i32);
    let mut last_progress = Instant::now();
    let mut finished = false;
    let deadline = Instant::now() + timeout;
    loop {
        let t = now_ns();
        // Send what the windows allow.
        for i in 0..flows.len() {
            if flows[i].src != me || t < go + flows[i].start_ns {
                continue;
            }
            if !flows[i].posted {
                if !flows[i]
                    .after
                    .iter()
                    .all(|&d| flows.get(d).is_some_and(|f| f.done))
                {
                    continue;
                }
                flows[i].posted = true;
                flows[i].t_start = now_ns();
            }
            let f = &mut flows[i];
            let mut out = Vec::new();
            while let Some(seq) = f.resend.pop() {
                out.push(seq);
            }
            while f.next < f.packets && f.next < f.acked.len() as u32 + WINDOW {
                out.push(f.next);
                f.next += 1;
            }
            for seq in out {
                let mut p = packet(PacketType::RudRequest, 0, f.id, seq, MTU);
                RelayHeader { addr: peers[f.dst] }.emit(&mut p);
                let _ = sock.send_to(&p, relay);
            }
        }
        if !finished
            && flows
                .iter()
                .filter(|f| f.src == me || f.dst == me)
                .all(|f| f.done)
        {
            let mut text = String::new();
            for f in &flows {
                if f.src == me {
                    text += &format!("send {} {} {}\n", f.id, f.t_start, f.t_done);
                } else if f.dst == me {
                    text += &format!("recv {} {}\n", f.id, f.t_done);
                }
            }
            text += "status ok\n";
            put(&dir, &format!("result.{me}"), &text).map_err(|e| e.to_string())?;
            finished = true;
        }
        if finished && dir.join("stop").exists() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err("timed out".into());
        }
        if last_progress.elapsed() > Duration::from_millis(5) {
            for f in flows.iter_mut().filter(|f| f.src == me && f.posted) {
                f.resend = (0..f.next).filter(|s| !f.acked.contains(s)).collect();
            }
            last_progress = Instant::now();
        }
        // Receive.
        let (len, tos) = {
            let mut iov = [std::io::IoSliceMut::new(&mut buf)];
            match nix::sys::socket::recvmsg::<nix::sys::socket::SockaddrStorage>(
                std::os::fd::AsRawFd::as_raw_fd(&sock),
                &mut iov,
                Some(&mut cmsg),
                nix::sys::socket::MsgFlags::empty(),
            ) {
                Ok(m) => {
                    let mut tos = 0;
                    if let Ok(it) = m.cmsgs() {
                        for c in it {
                            if let nix::sys::socket::ControlMessageOwned::Ipv4Tos(v) = c {
                                tos = v;
                            }
                        }
                    }
                    (m.bytes, tos)
                }
                Err(_) => continue,
            }
        };
        let Ok(h) = RelayHeader::parse(&buf[..len]) else {
            continue;
        };
        let u = &buf[RelayHeader::LEN..len];
        let (Ok(p), true) = (Prologue::parse(u), u.len() >= 12) else {
            continue;
        };
        let id = u32::from_be_bytes([u[4], u[5], u[6], u[7]]) as usize;
        let seq = u32::from_be_bytes([u[8], u[9], u[10], u[11]]);
        let Some(f) = flows.get_mut(id) else { continue };
        match p.ptype {
            PacketType::RudRequest if f.dst == me => {
                let trimmed = ip::trim_of(tos).is_some();
                if !trimmed {
                    f.got.insert(seq);
                    if !f.done && f.got.len() as u32 == f.packets {
                        f.done = true;
                        f.t_done = now_ns();
                    }
                }
                let nack = if trimmed { 1 } else { 0 };
                let mut a = packet(PacketType::AckCc, nack, id as u32, seq, 32);
                RelayHeader { addr: h.addr }.emit(&mut a);
                if host_of.contains_key(&h.addr) {
                    let _ = sock.send_to(&a, relay);
                }
            }
            PacketType::AckCc if f.src == me => {
                last_progress = Instant::now();
                if p.flags & 1 != 0 {
                    if !f.acked.contains(&seq) {
                        f.resend.push(seq);
                    }
                } else {
                    f.acked.insert(seq);
                    if !f.done && f.acked.len() as u32 == f.packets {
                        f.done = true;
                        f.t_done = now_ns();
                    }
                }
            }
            _ => {}
        }
    }
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("emu-fake-host: {e}");
            ExitCode::from(1)
        }
    }
}
