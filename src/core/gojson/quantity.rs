//! `resource.Quantity` of k8s.io/apimachinery v0.32: `ParseQuantity` followed by `MarshalJSON`.
//!
//! A quantity remembers its input when the parser's fast path judges it canonical and is otherwise
//! printed in canonical form: the largest exponent (a multiple of 3, or of 10 in base 2) that keeps
//! the mantissa an integer, with the suffix of the format the input used. Values are exact decimals;
//! anything finer than 1n is rounded up (away from zero), and binary-suffixed values are capped at
//! 2^63-1.

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Format {
    DecimalExponent,
    BinarySI,
    DecimalSI,
}

/// What the scanner splits a quantity into. `value` is the numeric prefix including the sign,
/// `num` the integer digits without leading zeros ("0" when none), `denom` the fraction digits.
struct Scanned<'a> {
    positive: bool,
    value: &'a str,
    num: &'a str,
    denom: &'a str,
    suffix: &'a str,
}

const SUFFIX_CHARS: &[u8] = b"eEinumkKMGTP";

fn scan(s: &str) -> Option<Scanned<'_>> {
    let b = s.as_bytes();
    let end = b.len();
    let mut positive = true;
    let mut pos = 0;
    match b.first() {
        Some(b'-') => {
            positive = false;
            pos = 1;
        }
        Some(b'+') => pos = 1,
        _ => {}
    }
    while pos < end && b[pos] == b'0' {
        pos += 1;
    }
    if pos >= end {
        return Some(Scanned { positive, value: "0", num: "0", denom: "", suffix: "" });
    }
    let num_start = pos;
    while pos < end && b[pos].is_ascii_digit() {
        pos += 1;
    }
    if pos >= end {
        return Some(Scanned { positive, value: s, num: &s[num_start..], denom: "", suffix: "" });
    }
    let num = if pos == num_start { "0" } else { &s[num_start..pos] };
    let mut denom = "";
    if b[pos] == b'.' {
        pos += 1;
        let denom_start = pos;
        while pos < end && b[pos].is_ascii_digit() {
            pos += 1;
        }
        if pos >= end {
            return Some(Scanned { positive, value: s, num, denom: &s[denom_start..], suffix: "" });
        }
        denom = &s[denom_start..pos];
    }
    let value = &s[..pos];
    let suffix_start = pos;
    while pos < end && SUFFIX_CHARS.contains(&b[pos]) {
        pos += 1;
    }
    if pos < end && (b[pos] == b'-' || b[pos] == b'+') {
        pos += 1;
    }
    while pos < end && b[pos].is_ascii_digit() {
        pos += 1;
    }
    (pos >= end).then(|| Scanned { positive, value, num, denom, suffix: &s[suffix_start..] })
}

/// The suffix as (base, exponent, format).
fn interpret(suffix: &str) -> Option<(u32, i32, Format)> {
    let decimal = |e| Some((10, e, Format::DecimalSI));
    let binary = |e| Some((2, e, Format::BinarySI));
    match suffix {
        "" => decimal(0),
        "n" => decimal(-9),
        "u" => decimal(-6),
        "m" => decimal(-3),
        "k" => decimal(3),
        "M" => decimal(6),
        "G" => decimal(9),
        "T" => decimal(12),
        "P" => decimal(15),
        "E" => decimal(18),
        "Ki" => binary(10),
        "Mi" => binary(20),
        "Gi" => binary(30),
        "Ti" => binary(40),
        "Pi" => binary(50),
        "Ei" => binary(60),
        _ if suffix.len() > 1 && (suffix.starts_with('e') || suffix.starts_with('E')) => {
            // strconv.ParseInt(.., 10, 64), then a conversion to int32 that wraps.
            let e: i64 = suffix[1..].parse().ok()?;
            Some((10, e as i32, Format::DecimalExponent))
        }
        _ => None,
    }
}

/// An exact decimal: sign, magnitude digits (0..=9, most significant first, no leading zeros;
/// empty for zero) times 10^exp.
#[derive(Clone, Debug)]
struct Dec {
    negative: bool,
    digits: Vec<u8>,
    exp: i64,
}

impl Dec {
    fn new(negative: bool, digits: impl IntoIterator<Item = u8>, exp: i64) -> Self {
        let mut d = Dec { negative, digits: digits.into_iter().collect(), exp };
        let leading = d.digits.iter().take_while(|x| **x == 0).count();
        d.digits.drain(..leading);
        d
    }

    fn is_zero(&self) -> bool {
        self.digits.is_empty()
    }

    /// inf.Dec's SetString: an optional leading sign, digits with at most one point, nothing else,
    /// at least one digit.
    fn parse(s: &str) -> Option<Dec> {
        let (negative, body) = match s.as_bytes().first() {
            Some(b'-') => (true, &s[1..]),
            Some(b'+') => (false, &s[1..]),
            _ => (false, s),
        };
        let (int, frac) = body.split_once('.').unwrap_or((body, ""));
        let all = || int.bytes().chain(frac.bytes());
        if int.is_empty() && frac.is_empty() || !all().all(|c| c.is_ascii_digit()) {
            return None;
        }
        Some(Dec::new(negative, all().map(|c| c - b'0'), -(frac.len() as i64)))
    }

    fn mul_small(&mut self, m: u32) {
        let mut carry = 0u64;
        for d in self.digits.iter_mut().rev() {
            let v = u64::from(*d) * u64::from(m) + carry;
            *d = (v % 10) as u8;
            carry = v / 10;
        }
        while carry > 0 {
            self.digits.insert(0, (carry % 10) as u8);
            carry /= 10;
        }
    }

    /// The magnitude rounded up to a multiple of 10^exp (no-op when already one).
    fn round_up_to_exp(&mut self, exp: i64) {
        if self.is_zero() || self.exp >= exp {
            return;
        }
        let drop = (exp - self.exp) as usize;
        if drop >= self.digits.len() {
            self.digits = vec![1];
        } else {
            let kept = self.digits.len() - drop;
            let inexact = self.digits[kept..].iter().any(|d| *d != 0);
            self.digits.truncate(kept);
            if inexact {
                self.add_one_ulp();
            }
        }
        self.exp = exp;
        *self = Dec::new(self.negative, std::mem::take(&mut self.digits), self.exp);
    }

    fn add_one_ulp(&mut self) {
        for d in self.digits.iter_mut().rev() {
            if *d == 9 {
                *d = 0;
            } else {
                *d += 1;
                return;
            }
        }
        self.digits.insert(0, 1);
    }

    /// Integer part digits (possibly empty) and whether a non-zero fraction remains.
    fn split_integer(&self) -> (Vec<u8>, bool) {
        if self.exp >= 0 {
            let mut int = self.digits.clone();
            if !int.is_empty() {
                int.extend(std::iter::repeat_n(0, self.exp as usize));
            }
            return (int, false);
        }
        let frac_len = self.exp.unsigned_abs() as usize;
        if frac_len >= self.digits.len() {
            return (Vec::new(), !self.is_zero());
        }
        let split = self.digits.len() - frac_len;
        (self.digits[..split].to_vec(), self.digits[split..].iter().any(|d| *d != 0))
    }

    /// Compares the magnitude with a non-negative integer.
    fn cmp_magnitude(&self, n: u64) -> std::cmp::Ordering {
        let (int, frac) = self.split_integer();
        let n_digits: Vec<u8> = n.to_string().bytes().map(|c| c - b'0').collect();
        let n_digits = if n == 0 { Vec::new() } else { n_digits };
        int.len().cmp(&n_digits.len()).then_with(|| int.cmp(&n_digits)).then(if frac {
            std::cmp::Ordering::Greater
        } else {
            std::cmp::Ordering::Equal
        })
    }

    fn sign_prefix(&self) -> &'static str {
        if self.negative { "-" } else { "" }
    }
}

fn digits_to_string(digits: &[u8]) -> String {
    if digits.is_empty() { "0".into() } else { digits.iter().map(|d| char::from(b'0' + d)).collect() }
}

/// Divides digit magnitude by `divisor`, returning the quotient if the remainder is zero.
fn exact_div(digits: &[u8], divisor: u64) -> Option<Vec<u8>> {
    let mut quotient = Vec::with_capacity(digits.len());
    let mut rem = 0u64;
    for d in digits {
        let cur = rem * 10 + u64::from(*d);
        quotient.push((cur / divisor) as u8);
        rem = cur % divisor;
    }
    if rem != 0 {
        return None;
    }
    let leading = quotient.iter().take_while(|x| **x == 0).count();
    quotient.drain(..leading);
    Some(quotient)
}

struct Parsed {
    /// The input, when the fast path found it canonical; it is then printed verbatim.
    verbatim: Option<String>,
    value: Dec,
    format: Format,
}

fn parse_quantity(s: &str) -> Option<Parsed> {
    if s.is_empty() {
        return None;
    }
    if s == "0" {
        return Some(Parsed { verbatim: Some(s.into()), value: Dec::new(false, [], 0), format: Format::DecimalSI });
    }
    let scanned = scan(s)?;
    let (base, exponent, format) = interpret(scanned.suffix)?;
    let digit_count = scanned.num.len() + scanned.denom.len();

    // The fast path: small enough for an int64 at a scale of at least 1n.
    let (precision, mut scale, mantissa): (i64, i32, i64) = match format {
        Format::DecimalExponent | Format::DecimalSI => (18 - digit_count as i64, exponent, 1),
        Format::BinarySI if exponent >= 0 && scanned.denom.is_empty() => {
            (15 - scanned.num.len() as i64 - i64::from(exponent * 3 / 10) - 1, 0, 1i64 << exponent)
        }
        Format::BinarySI => (-1, 0, 1),
    };
    if precision >= 0 {
        scale = scale.wrapping_sub(scanned.denom.len() as i32);
        if scale >= -9 {
            let shifted = format!("{}{}", scanned.num, scanned.denom);
            let parsed: i64 = shifted.parse().ok()?;
            if let Some(magnitude) = parsed.checked_mul(mantissa) {
                let canonical = match format {
                    Format::BinarySI => exponent % 10 == 0 && parsed & 0x07 != 0,
                    _ => scale % 3 == 0 && !shifted.ends_with("000") && !shifted.starts_with('0'),
                };
                let digits = magnitude.to_string().bytes().map(|c| c - b'0').collect::<Vec<_>>();
                return Some(Parsed {
                    verbatim: canonical.then(|| s.to_string()),
                    value: Dec::new(!scanned.positive, digits, i64::from(scale)),
                    format,
                });
            }
        }
    }

    // The slow path: arbitrary precision.
    let mut value = Dec::parse(scanned.value)?;
    if base == 10 {
        value.exp += i64::from(exponent);
    } else {
        for _ in 0..exponent {
            value.mul_small(2);
        }
    }
    value.round_up_to_exp(-9);
    let mut format = format;
    if format == Format::BinarySI && value.cmp_magnitude(i64::MAX as u64).is_gt() {
        value = Dec::new(value.negative, i64::MAX.to_string().bytes().map(|c| c - b'0'), 0);
    }
    if format == Format::BinarySI && !value.is_zero() && value.cmp_magnitude(1).is_lt() {
        format = Format::DecimalSI;
    }
    Some(Parsed { verbatim: None, value, format })
}

fn canonical(parsed: Parsed) -> String {
    if let Some(v) = parsed.verbatim {
        return v;
    }
    let value = parsed.value;
    if value.is_zero() {
        return "0".into();
    }
    let mut format = parsed.format;
    if format == Format::BinarySI {
        let (int, frac) = value.split_integer();
        if value.cmp_magnitude(1024).is_lt() || frac {
            format = Format::DecimalSI;
        } else {
            let mut n = int;
            let mut times = 0;
            while let Some(q) = exact_div(&n, 1024) {
                n = q;
                times += 1;
            }
            let suffix = match times {
                1 => "Ki",
                2 => "Mi",
                3 => "Gi",
                4 => "Ti",
                5 => "Pi",
                6 => "Ei",
                _ => "",
            };
            return format!("{}{}{suffix}", value.sign_prefix(), digits_to_string(&n));
        }
    }
    let mut digits = value.digits.clone();
    let trailing = digits.iter().rev().take_while(|d| **d == 0).count();
    digits.truncate(digits.len() - trailing);
    let exp = value.exp + trailing as i64;
    let exp3 = exp.div_euclid(3) * 3;
    digits.extend(std::iter::repeat_n(0, (exp - exp3) as usize));
    let suffix = match format {
        Format::DecimalExponent if exp3 == 0 => String::new(),
        Format::DecimalExponent => format!("e{exp3}"),
        _ => match exp3 {
            -9 => "n",
            -6 => "u",
            -3 => "m",
            3 => "k",
            6 => "M",
            9 => "G",
            12 => "T",
            15 => "P",
            18 => "E",
            // No suffix exists; Go then prints the bare mantissa.
            _ => "",
        }
        .to_string(),
    };
    format!("{}{}{suffix}", value.sign_prefix(), digits_to_string(&digits))
}

/// `Quantity.UnmarshalJSON` of a raw token whose quotes are already removed, then `MarshalJSON`.
pub(super) fn marshal(raw: &str) -> Option<String> {
    parse_quantity(raw.trim_matches(super::is_go_space)).map(canonical)
}

/// The same for a JSON string. `UnmarshalJSON` sees the string still escaped as the apiserver
/// wrote it; any character `encoding/json` escapes makes the quantity invalid.
pub(super) fn marshal_json_string(s: &str) -> Option<String> {
    if !json_string_is_plain(s) {
        return None;
    }
    marshal(s)
}

fn json_string_is_plain(s: &str) -> bool {
    !s.chars().any(|c| matches!(c, '\0'..='\u{1f}' | '"' | '\\' | '<' | '>' | '&' | '\u{2028}' | '\u{2029}'))
}

/// `UnmarshalJSON`, `RoundUp(-3)`, `MarshalJSON`. `RoundUp` leaves a quantity alone (and keeps
/// its remembered spelling) when its int64 scale is already -3 or coarser; otherwise it forgets
/// the spelling and rounds the value up, away from zero. Values parsed by the arbitrary-precision
/// path never had a spelling to keep.
pub(super) fn marshal_rounded_up_to_milli(raw: &str) -> Option<String> {
    let mut parsed = parse_quantity(raw.trim_matches(super::is_go_space))?;
    if parsed.value.exp < -3 {
        parsed.verbatim = None;
        parsed.value.round_up_to_exp(-3);
    }
    Some(canonical(parsed))
}

pub(super) fn marshal_json_string_rounded_up_to_milli(s: &str) -> Option<String> {
    if !json_string_is_plain(s) {
        return None;
    }
    marshal_rounded_up_to_milli(s)
}
