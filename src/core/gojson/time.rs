//! `metav1.Time`: parsed with `time.Parse(time.RFC3339, ..)` and printed in UTC with whole seconds.

const ZERO_TIME_UNIX: i64 = -62_135_596_800; // 0001-01-01T00:00:00Z, Go's zero time

/// The string metav1.Time marshals to after decoding `s`, or None for null (the zero time, or
/// input Go would reject).
pub(super) fn reformat_rfc3339(s: &str) -> Option<String> {
    let (unix, nanos) = parse(s.as_bytes())?;
    if unix == ZERO_TIME_UNIX && nanos == 0 {
        return None;
    }
    Some(format_utc(unix))
}

fn number(b: &[u8], min: i64, max: i64) -> Option<i64> {
    if !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = b.iter().fold(0i64, |acc, d| acc * 10 + i64::from(d - b'0'));
    (min..=max).contains(&n).then_some(n)
}

fn take<'a>(rest: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    let head = rest.get(..n)?;
    *rest = &rest[n..];
    Some(head)
}

fn literal(rest: &mut &[u8], c: u8) -> Option<()> {
    (take(rest, 1)? == [c]).then_some(())
}

fn is_leap(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    // Shift the year to start in March so the leap day is the last day of the year.
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let year_of_era = y - era * 400;
    let month_index = (month + 9) % 12; // March = 0
    let day_of_year = (153 * month_index + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 { month_index + 3 } else { month_index - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// `time.Parse(time.RFC3339, s)`. Go first tries a strict RFC 3339 scanner and then its general
/// layout parser, which accepts a superset: a one-digit hour, `,` before the fraction, and zone
/// offsets up to 24 hours and 60 minutes. This implements the general parser's rules for that layout.
fn parse(b: &[u8]) -> Option<(i64, u32)> {
    let mut rest = b;
    let year = number(take(&mut rest, 4)?, 0, 9999)?;
    literal(&mut rest, b'-')?;
    let month = number(take(&mut rest, 2)?, 1, 12)?;
    literal(&mut rest, b'-')?;
    let day = number(take(&mut rest, 2)?, 1, 31)?;
    literal(&mut rest, b'T')?;
    let hour_len = if rest.get(1).is_some_and(u8::is_ascii_digit) { 2 } else { 1 };
    let hour = number(take(&mut rest, hour_len)?, 0, 23)?;
    literal(&mut rest, b':')?;
    let minute = number(take(&mut rest, 2)?, 0, 59)?;
    literal(&mut rest, b':')?;
    let second = number(take(&mut rest, 2)?, 0, 59)?;
    let mut nanos = 0u32;
    if rest.len() >= 2 && matches!(rest[0], b'.' | b',') && rest[1].is_ascii_digit() {
        let n = 1 + rest[1..].iter().take_while(|c| c.is_ascii_digit()).count();
        // Only the first nine digits count.
        for i in 1..=9 {
            nanos = nanos * 10 + rest.get(i).filter(|_| i < n).map_or(0, |d| u32::from(d - b'0'));
        }
        rest = &rest[n..];
    }
    let offset = match rest {
        [b'Z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let seconds = (number(&[*h1, *h2], 0, 24)? * 60 + number(&[*m1, *m2], 0, 60)?) * 60;
            if *sign == b'-' { -seconds } else { seconds }
        }
        _ => return None,
    };
    if day > days_in_month(year, month) {
        return None;
    }
    let unix = days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second - offset;
    Some((unix, nanos))
}

fn format_utc(unix: i64) -> String {
    let days = unix.div_euclid(86_400);
    let secs = unix.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    let year = if year < 0 { format!("-{:04}", -year) } else { format!("{year:04}") };
    format!("{year}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", secs / 3600, secs / 60 % 60, secs % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_round_trip() {
        for days in [-800_000, -719_163, -1, 0, 1, 59, 60, 365, 11_016, 2_932_896] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(1, 1, 1) * 86_400, ZERO_TIME_UNIX);
    }

    #[test]
    fn rfc3339() {
        assert_eq!(reformat_rfc3339("2024-05-06T07:08:09Z").as_deref(), Some("2024-05-06T07:08:09Z"));
        assert_eq!(reformat_rfc3339("2024-05-06T07:08:09.999999999+02:30").as_deref(), Some("2024-05-06T04:38:09Z"));
        assert_eq!(reformat_rfc3339("2024-12-31T23:30:00-01:00").as_deref(), Some("2025-01-01T00:30:00Z"));
        assert_eq!(reformat_rfc3339("0000-01-01T00:30:00+01:00").as_deref(), Some("-0001-12-31T23:30:00Z"));
        assert_eq!(reformat_rfc3339("0001-01-01T00:00:00Z"), None);
        assert_eq!(reformat_rfc3339("0001-01-01T00:00:00.5Z").as_deref(), Some("0001-01-01T00:00:00Z"));
        assert_eq!(reformat_rfc3339("2023-02-29T00:00:00Z"), None);
        assert_eq!(reformat_rfc3339("2024-02-29T00:00:00z"), None);
        // Go's general layout parser: one-digit hour, comma fraction, 24h/60m offsets.
        assert_eq!(reformat_rfc3339("2024-01-01T7:00:00,5+24:60").as_deref(), Some("2023-12-31T06:00:00Z"));
        assert_eq!(reformat_rfc3339("2024-01-01T007:00:00Z"), None);
        assert_eq!(reformat_rfc3339("2024-01-01T07:00:00+0100"), None);
        assert_eq!(reformat_rfc3339("yesterday"), None);
    }
}
