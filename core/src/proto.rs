//! What the loop reads on an established session, per protocol: deliveries (their payload
//! starts with the 24-byte header) and the few control frames that need an answer or a
//! count. Handshakes, subscriptions and everything else stay with the Python clients.
//!
//! * MQTT 3.1.1: PUBLISH (QoS 0 deliveries); PINGRESP and anything else is skipped whole.
//! * NATS: `MSG`/`HMSG` deliveries; `PING` is answered with `PONG`; `-ERR` is counted.
//! * Redis (RESP2): `message` pushes on a subscriber; `:n` replies to PUBLISH on a publisher.

/// What a parse found, handed to the loop as it goes.
pub trait Sink {
    /// A delivered message's payload.
    fn delivery(&mut self, payload: &[u8]);
    /// Bytes to send back on this connection (e.g. `PONG`).
    fn answer(&mut self, bytes: &'static [u8]);
    /// A reply to one PUBLISH (Redis `:n`, the number of receivers).
    fn publish_reply(&mut self, receivers: i64);
    /// An error reply of the server (NATS `-ERR`, Redis `-...`).
    fn server_error(&mut self, text: &[u8]);
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Mqtt,
    Nats,
    Redis,
}

impl Protocol {
    pub fn from_name(name: &str) -> Option<Protocol> {
        match name {
            "mqtt" => Some(Protocol::Mqtt),
            "nats" => Some(Protocol::Nats),
            "redis" => Some(Protocol::Redis),
            _ => None,
        }
    }

    /// Parse whole frames of `buf`; returns the bytes consumed (the rest is a partial
    /// frame), or a protocol error.
    pub fn parse(self, buf: &[u8], sink: &mut dyn Sink) -> Result<usize, String> {
        match self {
            Protocol::Mqtt => parse_mqtt(buf, sink),
            Protocol::Nats => parse_nats(buf, sink),
            Protocol::Redis => parse_redis(buf, sink),
        }
    }

    /// The keepalive frame sent on a connection that wrote nothing for a while.
    pub fn keepalive(self) -> Option<&'static [u8]> {
        match self {
            Protocol::Mqtt => Some(&[0xC0, 0x00]), // PINGREQ
            Protocol::Nats | Protocol::Redis => None,
        }
    }
}

fn parse_mqtt(buf: &[u8], sink: &mut dyn Sink) -> Result<usize, String> {
    let mut at = 0;
    while buf.len() - at >= 2 {
        let first = buf[at];
        let (remaining, len_bytes) = match remaining_length(&buf[at + 1..])? {
            Some(v) => v,
            None => break,
        };
        let body = at + 1 + len_bytes;
        let end = body + remaining;
        if end > buf.len() {
            break;
        }
        if first >> 4 == 3 {
            let qos = (first >> 1) & 3;
            if remaining < 2 {
                return Err("malformed PUBLISH: no topic length".into());
            }
            let topic_len = u16::from_be_bytes([buf[body], buf[body + 1]]) as usize;
            let start = body + 2 + topic_len + if qos > 0 { 2 } else { 0 };
            if start > end {
                return Err("malformed PUBLISH: topic beyond the packet".into());
            }
            sink.delivery(&buf[start..end]);
        }
        at = end;
    }
    Ok(at)
}

/// MQTT's variable-length integer: `(value, bytes)`, None when incomplete.
fn remaining_length(buf: &[u8]) -> Result<Option<(usize, usize)>, String> {
    let mut value = 0usize;
    for i in 0..4 {
        let Some(&byte) = buf.get(i) else { return Ok(None) };
        value |= ((byte & 0x7F) as usize) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(Some((value, i + 1)));
        }
    }
    Err("malformed remaining length".into())
}

fn find_crlf(buf: &[u8], from: usize) -> Option<usize> {
    buf[from..].windows(2).position(|w| w == b"\r\n").map(|p| from + p)
}

fn parse_nats(buf: &[u8], sink: &mut dyn Sink) -> Result<usize, String> {
    let mut at = 0;
    while let Some(eol) = find_crlf(buf, at) {
        let line = &buf[at..eol];
        let next = eol + 2;
        if line.starts_with(b"MSG ") || line.starts_with(b"HMSG ") {
            let fields: Vec<&[u8]> = line.split(|&b| b == b' ').filter(|f| !f.is_empty()).collect();
            let total = number(fields.last().copied().unwrap_or(b""))?;
            let headers = if line[0] == b'H' && fields.len() >= 5 {
                number(fields[fields.len() - 2])?
            } else {
                0
            };
            if headers > total {
                return Err("HMSG header size beyond the message".into());
            }
            let end = next + total;
            if end + 2 > buf.len() {
                break;
            }
            sink.delivery(&buf[next + headers..end]);
            at = end + 2;
            continue;
        }
        if line == b"PING" {
            sink.answer(b"PONG\r\n");
        } else if line.starts_with(b"-ERR") {
            sink.server_error(line);
        }
        at = next;
    }
    Ok(at)
}

fn number(text: &[u8]) -> Result<usize, String> {
    std::str::from_utf8(text)
        .ok()
        .and_then(|t| t.parse::<usize>().ok())
        .ok_or_else(|| format!("not a size: {:?}", String::from_utf8_lossy(text)))
}

fn parse_redis(buf: &[u8], sink: &mut dyn Sink) -> Result<usize, String> {
    let mut at = 0;
    while at < buf.len() {
        match buf[at] {
            b':' => {
                let Some(eol) = find_crlf(buf, at) else { break };
                let value = std::str::from_utf8(&buf[at + 1..eol])
                    .ok()
                    .and_then(|t| t.parse::<i64>().ok())
                    .ok_or("malformed integer reply")?;
                sink.publish_reply(value);
                at = eol + 2;
            }
            b'-' => {
                let Some(eol) = find_crlf(buf, at) else { break };
                sink.server_error(&buf[at..eol]);
                at = eol + 2;
            }
            b'+' => {
                let Some(eol) = find_crlf(buf, at) else { break };
                at = eol + 2;
            }
            b'*' => match redis_array(buf, at)? {
                Some((end, kind, payload)) => {
                    if kind == b"message" || kind == b"pmessage" {
                        sink.delivery(&buf[payload.0..payload.1]);
                    }
                    at = end;
                }
                None => break,
            },
            other => return Err(format!("unexpected RESP type byte {other:#04x}")),
        }
    }
    Ok(at)
}

/// A RESP2 array of bulk strings at `at`: `(end, first element, last element's range)`,
/// None when incomplete.
#[allow(clippy::type_complexity)]
fn redis_array(buf: &[u8], at: usize) -> Result<Option<(usize, &[u8], (usize, usize))>, String> {
    let Some(eol) = find_crlf(buf, at) else { return Ok(None) };
    let count = number(&buf[at + 1..eol])?;
    let mut pos = eol + 2;
    let mut first: &[u8] = b"";
    let mut last = (pos, pos);
    for i in 0..count {
        if pos >= buf.len() {
            return Ok(None);
        }
        let Some(eol) = find_crlf(buf, pos) else { return Ok(None) };
        match buf[pos] {
            b'$' => {
                let len = number(&buf[pos + 1..eol])?;
                let start = eol + 2;
                if start + len + 2 > buf.len() {
                    return Ok(None);
                }
                if i == 0 {
                    first = &buf[start..start + len];
                }
                last = (start, start + len);
                pos = start + len + 2;
            }
            b':' => pos = eol + 2,
            other => return Err(format!("unexpected RESP element {other:#04x} in a push")),
        }
    }
    Ok(Some((pos, first, last)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Seen {
        deliveries: Vec<Vec<u8>>,
        answers: Vec<&'static [u8]>,
        replies: Vec<i64>,
        errors: usize,
    }

    impl Sink for Seen {
        fn delivery(&mut self, payload: &[u8]) {
            self.deliveries.push(payload.to_vec());
        }
        fn answer(&mut self, bytes: &'static [u8]) {
            self.answers.push(bytes);
        }
        fn publish_reply(&mut self, receivers: i64) {
            self.replies.push(receivers);
        }
        fn server_error(&mut self, _text: &[u8]) {
            self.errors += 1;
        }
    }

    #[test]
    fn mqtt_publishes_are_delivered_and_a_partial_packet_waits() {
        let mut data = vec![0x30, 7, 0, 2, b'a', b'b', 1, 2, 3, 0xD0, 0];
        data.extend_from_slice(&[0x30, 9, 0, 1]);
        let mut seen = Seen::default();
        let used = Protocol::Mqtt.parse(&data, &mut seen).unwrap();
        assert_eq!(used, 11);
        assert_eq!(seen.deliveries, vec![vec![1, 2, 3]]);
    }

    #[test]
    fn mqtt_long_remaining_lengths_are_read() {
        let payload = vec![7u8; 200];
        let mut data = vec![0x30, 0xCB, 0x01, 0, 1, b't']; // 203 = 0x4B | 0x01 << 7
        data.extend_from_slice(&payload);
        let mut seen = Seen::default();
        assert_eq!(Protocol::Mqtt.parse(&data, &mut seen).unwrap(), data.len());
        assert_eq!(seen.deliveries[0], payload);
    }

    #[test]
    fn nats_messages_pings_and_errors() {
        let data = b"MSG a.b 1 3\r\nxyz\r\nPING\r\n-ERR 'x'\r\nHMSG a 1 3 5\r\nh\r\nhi\r\nMSG a 1 5\r\nab";
        let mut seen = Seen::default();
        let used = Protocol::Nats.parse(data, &mut seen).unwrap();
        assert_eq!(&data[used..], b"MSG a 1 5\r\nab");
        assert_eq!(seen.deliveries, vec![b"xyz".to_vec(), b"hi".to_vec()]);
        assert_eq!(seen.answers, vec![b"PONG\r\n" as &[u8]]);
        assert_eq!(seen.errors, 1);
    }

    #[test]
    fn redis_pushes_and_publish_replies() {
        let data = b":1\r\n*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$3\r\nabc\r\n:0\r\n*3\r\n$7\r\nmess";
        let mut seen = Seen::default();
        let used = Protocol::Redis.parse(data, &mut seen).unwrap();
        assert_eq!(&data[used..], b"*3\r\n$7\r\nmess");
        assert_eq!(seen.deliveries, vec![b"abc".to_vec()]);
        assert_eq!(seen.replies, vec![1, 0]);
    }
}
