//! Two real endpoints over UDP on 127.0.0.1.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{pattern, send, Shared};
use uet::{
    CompletionError, CompletionKind, CompletionLevel, Config, Endpoint, ProbeFlags, RecvOp, SendOp,
};

fn pair() -> (Endpoint, Endpoint) {
    let cfg = Config::default();
    let a = Endpoint::bind(&cfg, "127.0.0.1:0".parse().unwrap()).unwrap();
    let b = Endpoint::bind(&cfg, "127.0.0.1:0".parse().unwrap()).unwrap();
    (a, b)
}

/// Progress both until `n` completions arrived at each side's filter.
fn drive(a: &mut Endpoint, b: &mut Endpoint, want: usize) -> Vec<uet::Completion> {
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while got.len() < want {
        assert!(
            Instant::now() < deadline,
            "hung with {} of {want} completions",
            got.len()
        );
        a.progress();
        b.progress();
        while let Some(c) = a.poll_completion() {
            got.push(c);
        }
        while let Some(c) = b.poll_completion() {
            got.push(c);
        }
    }
    got
}

fn shared_recv(len: usize, tag: Option<u64>, context: u64) -> (RecvOp, Shared) {
    let buf = Shared(Arc::new(Mutex::new(vec![0u8; len])));
    let op = RecvOp {
        src: None,
        tagged: tag.is_some(),
        tag: tag.unwrap_or(0),
        ignore: 0,
        buffer: Box::new(buf.clone()),
        context,
        signal: true,
        probe: ProbeFlags::default(),
    };
    (op, buf)
}

#[test]
fn sizes_expected_and_unexpected() {
    let (mut a, mut b) = pair();
    let dest = b.local_addr();
    for (i, &len) in [0usize, 1, 100, 8944, 8945, 65536, 1 << 20, 5_000_003]
        .iter()
        .enumerate()
    {
        let data = pattern(i as u64, len);
        let (op, buf) = shared_recv(len, Some(i as u64), 1000 + i as u64);
        let expected = i % 2 == 0;
        if expected {
            b.recv(op).unwrap();
            a.send(send(dest, data.clone(), Some(i as u64), i as u64))
                .unwrap();
        } else {
            a.send(send(dest, data.clone(), Some(i as u64), i as u64))
                .unwrap();
            // Until the receiver holds the message (all of it when eager,
            // the eager part of a rendezvous send, whose sender then waits
            // for the pull).
            let deadline = Instant::now() + Duration::from_secs(60);
            let before = b.engine_stats().packets_received;
            while b.engine_stats().packets_received == before {
                assert!(Instant::now() < deadline, "message never arrived");
                a.progress();
                b.progress();
            }
            for _ in 0..1000 {
                a.progress();
                b.progress();
            }
            b.recv(op).unwrap();
        }
        let cs = drive(&mut a, &mut b, 2);
        assert!(cs
            .iter()
            .any(|c| c.kind == CompletionKind::Send && c.context == i as u64));
        let r = cs.iter().find(|c| c.kind == CompletionKind::Recv).unwrap();
        assert_eq!(
            (r.len, r.tag, r.src, r.error),
            (len, i as u64, Some(a.local_addr()), None)
        );
        assert!(*buf.0.lock().unwrap() == data, "size {len} corrupted");
    }
}

#[test]
fn same_tag_messages_match_in_send_order() {
    let (mut a, mut b) = pair();
    let dest = b.local_addr();
    let n = 300;
    for i in 0..n {
        a.send(send(dest, (i as u32).to_le_bytes().to_vec(), Some(5), i))
            .unwrap();
    }
    let mut bufs = Vec::new();
    for i in 0..n {
        let (op, buf) = shared_recv(4, Some(5), 10_000 + i);
        b.recv(op).unwrap();
        bufs.push(buf);
    }
    drive(&mut a, &mut b, 2 * n as usize);
    for (i, buf) in bufs.iter().enumerate() {
        assert_eq!(*buf.0.lock().unwrap(), (i as u32).to_le_bytes().to_vec());
    }
}

#[test]
fn truncation_cancel_and_peek() {
    let (mut a, mut b) = pair();
    let dest = b.local_addr();
    let (op, buf) = shared_recv(100, Some(1), 77);
    b.recv(op).unwrap();
    a.send(send(dest, pattern(3, 1000), Some(1), 1)).unwrap();
    let cs = drive(&mut a, &mut b, 2);
    let r = cs.iter().find(|c| c.kind == CompletionKind::Recv).unwrap();
    assert_eq!(r.error, Some(CompletionError::Truncated { overflow: 900 }));
    assert_eq!(*buf.0.lock().unwrap(), pattern(3, 1000)[..100].to_vec());

    let (op, _) = shared_recv(10, Some(9), 88);
    b.recv(op).unwrap();
    assert!(b.cancel(88));
    assert!(!b.cancel(88));
    let c = b.poll_completion().unwrap();
    assert_eq!((c.context, c.error), (88, Some(CompletionError::Canceled)));

    // Peek with nothing there, then peek+claim, then claim.
    let (mut op, _) = shared_recv(10, Some(4), 90);
    op.probe.peek = true;
    b.recv(op).unwrap();
    assert_eq!(
        b.poll_completion().unwrap().error,
        Some(CompletionError::NoMessage)
    );
    a.send(send(dest, pattern(4, 10), Some(4), 2)).unwrap();
    drive(&mut a, &mut b, 1);
    let (mut op, _) = shared_recv(0, Some(4), 91);
    op.probe = ProbeFlags {
        peek: true,
        claim: true,
        discard: false,
    };
    b.recv(op).unwrap();
    let c = b.poll_completion().unwrap();
    assert_eq!((c.len, c.tag, c.error), (10, 4, None));
    // A plain receive does not get the claimed message.
    let (op, _) = shared_recv(10, Some(4), 92);
    b.recv(op).unwrap();
    assert!(b.poll_completion().is_none());
    let (mut op, buf) = shared_recv(10, Some(4), 91);
    op.probe = ProbeFlags {
        peek: false,
        claim: true,
        discard: false,
    };
    b.recv(op).unwrap();
    let c = b.poll_completion().unwrap();
    assert_eq!((c.context, c.len, c.error), (91, 10, None));
    assert_eq!(*buf.0.lock().unwrap(), pattern(4, 10));
}

#[test]
fn completion_levels_and_cq_data() {
    let (mut a, mut b) = pair();
    let dest = b.local_addr();
    for (i, level) in [
        uet::CompletionLevel::Inject,
        uet::CompletionLevel::Transmit,
        uet::CompletionLevel::Delivery,
    ]
    .into_iter()
    .enumerate()
    {
        let mut op = send(dest, pattern(i as u64, 30_000), None, i as u64);
        op.level = level;
        op.cq_data = Some(0xfeed_0000 + i as u64);
        a.send(op).unwrap();
        if level == uet::CompletionLevel::Inject {
            // Complete at once: the data was copied.
            assert_eq!(a.poll_completion().map(|c| c.context), Some(0));
        }
        let mut cs = Vec::new();
        if level == uet::CompletionLevel::Delivery {
            // Held as unexpected counts as delivered (fi_cq(3)): the send
            // completes before any receive is posted.
            cs = drive(&mut a, &mut b, 1);
            assert_eq!((cs[0].kind, cs[0].context), (CompletionKind::Send, 2));
        }
        let (op, buf) = shared_recv(30_000, None, 100 + i as u64);
        b.recv(op).unwrap();
        let want = if level == uet::CompletionLevel::Transmit {
            2
        } else {
            1
        };
        cs.extend(drive(&mut a, &mut b, want));
        let r = cs.iter().find(|c| c.kind == CompletionKind::Recv).unwrap();
        assert_eq!(r.data, Some(0xfeed_0000 + i as u64));
        assert!(!r.tagged);
        assert_eq!(*buf.0.lock().unwrap(), pattern(i as u64, 30_000));
    }
}

#[test]
fn msg_and_tagged_queues_are_separate() {
    let (mut a, mut b) = pair();
    let dest = b.local_addr();
    let (tagged_op, tagged_buf) = shared_recv(8, Some(3), 1);
    b.recv(tagged_op).unwrap();
    a.send(send(dest, vec![1; 8], None, 10)).unwrap();
    a.send(send(dest, vec![2; 8], Some(3), 11)).unwrap();
    let cs = drive(&mut a, &mut b, 3);
    let r = cs.iter().find(|c| c.kind == CompletionKind::Recv).unwrap();
    assert_eq!(r.context, 1);
    assert_eq!(*tagged_buf.0.lock().unwrap(), vec![2; 8]);
    // The untagged message waits for an untagged receive.
    let (op, buf) = shared_recv(8, None, 2);
    b.recv(op).unwrap();
    assert_eq!(b.poll_completion().map(|c| c.context), Some(2));
    assert_eq!(*buf.0.lock().unwrap(), vec![1; 8]);
}

#[test]
fn silent_peer_fails_the_send() {
    let cfg = Config {
        rto_min_us: 200,
        rto_max_us: 2000,
        max_retries: 5,
        ..Config::default()
    };
    let mut a = Endpoint::bind(&cfg, "127.0.0.1:0".parse().unwrap()).unwrap();
    // Bind and drop a socket to get a port nobody listens on.
    let dead = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    a.send(send(dead, pattern(1, 50_000), Some(1), 7)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let c = loop {
        assert!(
            Instant::now() < deadline,
            "send to a dead peer never failed"
        );
        a.progress();
        if let Some(c) = a.poll_completion() {
            break c;
        }
    };
    assert_eq!(
        (c.context, c.error),
        (7, Some(CompletionError::PeerUnreachable))
    );
    // The endpoint still works for other peers afterwards.
    let mut b = Endpoint::bind(&cfg, "127.0.0.1:0".parse().unwrap()).unwrap();
    let (op, buf) = shared_recv(10, None, 1);
    b.recv(op).unwrap();
    a.send(send(b.local_addr(), pattern(2, 10), None, 8))
        .unwrap();
    drive(&mut a, &mut b, 2);
    assert_eq!(*buf.0.lock().unwrap(), pattern(2, 10));
}

/// Sends that asked for no completion (fi_inject, FI_SELECTIVE_COMPLETION
/// without FI_COMPLETION) stay silent when they succeed, even if the peer
/// dies afterwards, but report failure like any other (fi_cq(3)), at every
/// completion level.
#[test]
fn unsignalled_sends_report_failure_only() {
    let cfg = Config {
        rto_min_us: 200,
        rto_max_us: 2000,
        max_retries: 5,
        ..Config::default()
    };
    let levels = [
        CompletionLevel::Inject,
        CompletionLevel::Transmit,
        CompletionLevel::Delivery,
    ];
    let unsignalled = |dest, level, context| SendOp {
        level,
        signal: false,
        ..send(dest, pattern(context, 100), None, context)
    };
    let mut a = Endpoint::bind(&cfg, "127.0.0.1:0".parse().unwrap()).unwrap();
    let mut b = Endpoint::bind(&cfg, "127.0.0.1:0".parse().unwrap()).unwrap();
    let b_addr = b.local_addr();
    for (i, &level) in levels.iter().enumerate() {
        b.recv(shared_recv(100, None, i as u64).0).unwrap();
        a.send(unsignalled(b_addr, level, 20 + i as u64)).unwrap();
    }
    // Delivered after them: once it completes, the peer has acknowledged
    // them too.
    b.recv(shared_recv(100, None, 3).0).unwrap();
    a.send(SendOp {
        level: CompletionLevel::Delivery,
        ..send(b_addr, pattern(9, 100), None, 29)
    })
    .unwrap();
    let cs = drive(&mut a, &mut b, 5);
    let mut sent: Vec<_> = cs
        .iter()
        .filter(|c| c.kind == CompletionKind::Send)
        .map(|c| (c.context, c.error))
        .collect();
    sent.sort_by_key(|(ctx, _)| *ctx);
    assert_eq!(sent, vec![(29, None)], "only the signalled send completes");
    drop(b);
    // The peer is gone: a later send fails, and only that one.
    a.send(send(b_addr, pattern(10, 100), None, 30)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut failed = Vec::new();
    while !failed.iter().any(|&(ctx, _)| ctx == 30) {
        assert!(
            Instant::now() < deadline,
            "send to a dead peer never failed"
        );
        a.progress();
        while let Some(c) = a.poll_completion() {
            failed.push((c.context, c.error));
        }
    }
    assert_eq!(failed, vec![(30, Some(CompletionError::PeerUnreachable))]);

    // To a port nobody listens on, every unsignalled send fails.
    let dead = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    for (i, &level) in levels.iter().enumerate() {
        a.send(unsignalled(dead, level, 40 + i as u64)).unwrap();
    }
    let mut failed = Vec::new();
    while failed.len() < levels.len() {
        assert!(
            Instant::now() < deadline,
            "unsignalled sends to a dead peer never failed: {failed:?}"
        );
        a.progress();
        while let Some(c) = a.poll_completion() {
            failed.push((c.context, c.error));
        }
    }
    failed.sort_by_key(|(ctx, _)| *ctx);
    let unreachable = Some(CompletionError::PeerUnreachable);
    assert_eq!(
        failed,
        vec![(40, unreachable), (41, unreachable), (42, unreachable)]
    );
}

/// A multi-receive buffer that gives each message a piece of its own.
struct Pieces {
    room: usize,
}

impl uet::MsgBuffer for Pieces {
    fn len(&self) -> usize {
        self.room
    }
    fn read_at(&self, _: usize, _: &mut [u8]) {}
    fn write_at(&mut self, _: usize, _: &[u8]) {}
    fn split_front(&mut self, len: usize) -> Option<Box<dyn uet::MsgBuffer>> {
        if len >= self.room {
            return None;
        }
        self.room -= len;
        Some(Box::new(vec![0u8; len]))
    }
}

/// A multi-receive buffer posted while the posted queue is full takes the
/// messages waiting for it and is accepted: refused after taking them, its
/// owner would never expect their completions.
#[test]
fn multi_receive_buffer_that_took_messages_is_accepted_on_a_full_queue() {
    let (mut a, mut b) = pair();
    let dest = b.local_addr();
    for i in 0..2 {
        a.send(send(dest, pattern(i, 100), None, i)).unwrap();
    }
    // Both sends complete once the receiver holds them (unexpected).
    drive(&mut a, &mut b, 2);
    for i in 0..Config::QUEUE_DEPTH {
        b.recv(common::recv(8, Some(1), 1000 + i as u64)).unwrap();
    }
    let multi = RecvOp {
        buffer: Box::new(Pieces { room: 1000 }),
        ..common::recv(0, None, 77)
    };
    assert!(b.recv(multi).is_ok(), "refused after taking messages");
    let got: Vec<_> = drive(&mut a, &mut b, 2)
        .iter()
        .map(|c| (c.context, c.len, c.error))
        .collect();
    assert_eq!(got, vec![(77, 100, None), (77, 100, None)]);
}

/// A receiver that dies in the middle of a transfer: the survivor's sends
/// fail with FI_EIO-class errors once the retries run out (the bound is in
/// provider/README.md), and a new endpoint at the same address is then
/// reached through a fresh delivery context.
#[test]
fn peer_killed_mid_transfer() {
    let cfg = Config {
        rto_min_us: 200,
        rto_max_us: 2000,
        max_retries: 6,
        // Eager: the second send then waits behind the first one's data
        // (tests/rendezvous.rs kills peers in the middle of a pull).
        rendezvous_bytes: 0,
        ..Config::default()
    };
    let mut a = Endpoint::bind(&cfg, "127.0.0.1:0".parse().unwrap()).unwrap();
    let mut b = Endpoint::bind(&cfg, "127.0.0.1:0".parse().unwrap()).unwrap();
    let b_addr = b.local_addr();
    let len = 32 << 20;
    let (op, _buf) = shared_recv(len, Some(3), 1);
    b.recv(op).unwrap();
    a.send(send(b_addr, pattern(1, len), Some(3), 10)).unwrap();
    a.send(send(b_addr, pattern(2, 1000), Some(3), 11)).unwrap();
    // Run until the receiver holds part of the message, then kill it.
    let deadline = Instant::now() + Duration::from_secs(60);
    while b.engine_stats().packets_received < 8 {
        assert!(Instant::now() < deadline, "transfer never started");
        a.progress();
        b.progress();
    }
    drop(b);
    let mut failed = Vec::new();
    while failed.len() < 2 {
        assert!(
            Instant::now() < deadline,
            "sends to a dead peer never failed"
        );
        a.progress();
        while let Some(c) = a.poll_completion() {
            failed.push((c.context, c.error));
        }
    }
    failed.sort_by_key(|(ctx, _)| *ctx);
    assert_eq!(
        failed,
        vec![
            (10, Some(CompletionError::PeerUnreachable)),
            (11, Some(CompletionError::PeerUnreachable))
        ]
    );
    // The peer comes back at the same address: a fresh context reaches it.
    // (Tests running beside this one bind ephemeral ports too; should one
    // have been given this port meanwhile, wait for it to let go.)
    let mut b = loop {
        match Endpoint::bind(&cfg, b_addr) {
            Ok(b) => break b,
            Err(e) => assert!(Instant::now() < deadline, "rebinding {b_addr}: {e}"),
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let (op, buf) = shared_recv(100, None, 2);
    b.recv(op).unwrap();
    a.send(send(b_addr, pattern(3, 100), None, 12)).unwrap();
    drive(&mut a, &mut b, 2);
    assert_eq!(*buf.0.lock().unwrap(), pattern(3, 100));
}

/// FI_UET_TRACE: the sender writes one CSV line per ACK with its window.
#[test]
fn trace_file_records_acks() {
    let path = std::env::temp_dir().join(format!("uet-trace-{}-%e.csv", std::process::id()));
    let cfg = Config {
        trace: path.to_string_lossy().into_owned(),
        ..Config::default()
    };
    let mut a = Endpoint::bind(&cfg, "127.0.0.1:0".parse().unwrap()).unwrap();
    let mut b = Endpoint::bind(&Config::default(), "127.0.0.1:0".parse().unwrap()).unwrap();
    let file = path
        .to_string_lossy()
        .replace("%e", &a.local_addr().port().to_string());
    let (op, _buf) = shared_recv(300_000, None, 1);
    b.recv(op).unwrap();
    a.send(send(b.local_addr(), pattern(1, 300_000), None, 2))
        .unwrap();
    drive(&mut a, &mut b, 2);
    drop(a);
    let text = std::fs::read_to_string(&file).unwrap();
    let _ = std::fs::remove_file(&file);
    let mut lines = text.lines();
    assert!(lines.next().unwrap().starts_with("time_ns,peer,event"));
    let acks: Vec<&str> = lines.filter(|l| l.contains(",ack,")).collect();
    assert!(!acks.is_empty(), "{text}");
    let cwnd: u64 = acks[0].split(',').nth(6).unwrap().parse().unwrap();
    assert!(cwnd > 0);
}
