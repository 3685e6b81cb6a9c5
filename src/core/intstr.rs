//! Int-or-percent scaling, reproducing the three Go parsers Kruise's CloneSet path relies on.
//!
//! They disagree on purpose-relevant details, so each field must use the one Kruise uses:
//!
//! | field | Kruise call | parser here | rounding |
//! |---|---|---|---|
//! | `updateStrategy.partition` | `util.CalculatePartitionReplicas` | [`scaled_value_fractional`] | up, plus the 99% rule |
//! | `updateStrategy.maxSurge` | `intstr.GetValueFromIntOrPercent`, error ignored | [`legacy_value_from_int_or_percent`] | up |
//! | `updateStrategy.maxUnavailable` | same | same | up if maxSurge == 0, else down |
//! | `scaleStrategy.maxUnavailable` | same | same | up |
//!
//! The controller (`calculateDiffsWithExpectation`) calls apimachinery's *deprecated*
//! `GetValueFromIntOrPercent`, not `GetScaledValueFromIntOrPercent`: it treats every string as a
//! percentage with or without `%`, so `"5"` means 5%. Only integer percentages parse; anything
//! else (for example `"12.5%"`) is an error that the controller drops, leaving 0.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// Default `updateStrategy.maxUnavailable` (`DefaultCloneSetMaxUnavailable`).
pub(crate) const DEFAULT_MAX_UNAVAILABLE: &str = "20%";

/// Kruise's `util.GetScaledValueFromIntOrPercent`: percentages must end in `%` and may be
/// fractional (`"33.3%"`). A bare number string such as `"5"` is an error. Negative results are
/// returned as they are; validating them is the caller's job.
///
/// Non-finite numbers (`"NaN%"`, `"inf%"`) are rejected: Go would turn them into an undefined
/// integer, which no valid spec relies on.
pub(crate) fn scaled_value_fractional(v: &IntOrString, total: i32, round_up: bool) -> Result<i32, String> {
    match v {
        IntOrString::Int(i) => Ok(*i),
        IntOrString::String(s) => {
            let number = s.strip_suffix('%').ok_or_else(|| format!("invalid value {s:?}: string is not a percentage"))?;
            let percent: f64 = number.parse().map_err(|e| format!("invalid value {s:?}: {e}"))?;
            if !percent.is_finite() {
                return Err(format!("invalid value {s:?}: not a finite number"));
            }
            Ok(scale(percent, total, round_up))
        }
    }
}

/// apimachinery's `intstr.GetScaledValueFromIntOrPercent`: percentages must end in exactly one
/// trailing `%` and be integers (`"12.5%"` and `"5"` are errors).
#[cfg(test)]
pub(crate) fn scaled_value_integer_percent(v: &IntOrString, total: i32, round_up: bool) -> Result<i32, String> {
    match v {
        IntOrString::Int(i) => Ok(*i),
        IntOrString::String(s) => {
            let number = s.strip_suffix('%').ok_or_else(|| format!("invalid value {s:?}: string is not a percentage"))?;
            let percent = parse_go_int(number).map_err(|e| format!("invalid value {s:?}: {e}"))?;
            Ok(scale(percent as f64, total, round_up))
        }
    }
}

/// apimachinery's deprecated `intstr.GetValueFromIntOrPercent`, which is what Kruise's controller
/// calls for maxSurge and both maxUnavailable fields: every `%` is removed and any string is a
/// percentage, so `"5"` scales like `"5%"`. Only integers parse.
pub(crate) fn legacy_value_from_int_or_percent(v: &IntOrString, total: i32, round_up: bool) -> Result<i32, String> {
    match v {
        IntOrString::Int(i) => Ok(*i),
        IntOrString::String(s) => {
            let percent = parse_go_int(&s.replace('%', "")).map_err(|e| format!("invalid value {s:?}: {e}"))?;
            Ok(scale(percent as f64, total, round_up))
        }
    }
}

/// Kruise's `util.CalculatePartitionReplicas`: the number of pods to keep on the current revision.
///
/// Percentages round up (so any non-zero percentage keeps at least one old pod), and a percentage
/// other than the literal `"100%"` that would keep every one of more than one replica keeps
/// `replicas - 1` instead, so `"99%"` still updates one pod. The result is clamped to
/// `[0, replicas]`. No partition means 0.
pub fn partition_replicas(replicas: i32, partition: Option<&IntOrString>) -> Result<i32, String> {
    let Some(partition) = partition else { return Ok(0) };
    let mut value = scaled_value_fractional(partition, replicas, true)?;
    let is_percentage_below_all = matches!(partition, IntOrString::String(s) if s != "100%");
    if replicas > 1 && value == replicas && is_percentage_below_all {
        value = replicas - 1;
    }
    Ok(value.min(replicas).max(0))
}

/// The maxSurge the controller works with: 0 when unset or while paused, percentages round up,
/// and an unparsable value counts as 0 (Kruise ignores the parser's error).
pub fn max_surge(strategy_max_surge: Option<&IntOrString>, replicas: i32, paused: bool) -> i32 {
    match strategy_max_surge {
        Some(v) if !paused => legacy_value_from_int_or_percent(v, replicas, true).unwrap_or(0),
        _ => 0,
    }
}

/// The update maxUnavailable the controller works with: default `"20%"`, rounding up only when no
/// surge is in use (with surge, rounding down keeps the two from adding up past the intent), and an
/// unparsable value counts as 0.
pub fn max_unavailable(max_unavailable: Option<&IntOrString>, replicas: i32, max_surge: i32) -> i32 {
    let default = IntOrString::String(DEFAULT_MAX_UNAVAILABLE.to_owned());
    legacy_value_from_int_or_percent(max_unavailable.unwrap_or(&default), replicas, max_surge == 0).unwrap_or(0)
}

/// The scale-up limit from `scaleStrategy.maxUnavailable`: unset means unlimited (`i32::MAX`),
/// percentages round up, and an unparsable value counts as 0.
pub(crate) fn scale_max_unavailable(v: Option<&IntOrString>, replicas: i32) -> i32 {
    match v {
        None => i32::MAX,
        Some(v) => legacy_value_from_int_or_percent(v, replicas, true).unwrap_or(0),
    }
}

/// Go's `strconv.Atoi` on a 64-bit platform: optional sign, ASCII digits only, int64 range.
/// Rust's `i64::from_str` accepts exactly that grammar.
fn parse_go_int(s: &str) -> Result<i64, std::num::ParseIntError> {
    s.parse::<i64>()
}

/// `percent * total / 100` rounded the way the Go helpers do (in float64, in this order), then
/// saturated into i32 where Go's int would have been wider.
fn scale(percent: f64, total: i32, round_up: bool) -> i32 {
    let exact = percent * f64::from(total) / 100.0;
    let rounded = if round_up { exact.ceil() } else { exact.floor() };
    // `as` saturates for out-of-range floats.
    rounded as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int(i: i32) -> IntOrString {
        IntOrString::Int(i)
    }

    fn string(s: &str) -> IntOrString {
        IntOrString::String(s.to_owned())
    }

    #[test]
    fn fractional_parser_accepts_fractional_percentages() {
        assert_eq!(scaled_value_fractional(&string("33.3%"), 10, true), Ok(4));
        assert_eq!(scaled_value_fractional(&string("33.3%"), 10, false), Ok(3));
        assert_eq!(scaled_value_fractional(&string("12.5%"), 8, true), Ok(1));
        assert_eq!(scaled_value_fractional(&string("50%"), 5, true), Ok(3));
        assert_eq!(scaled_value_fractional(&string("50%"), 5, false), Ok(2));
        assert_eq!(scaled_value_fractional(&int(7), 5, true), Ok(7));
    }

    #[test]
    fn fractional_parser_returns_negative_values_for_the_caller_to_validate() {
        assert_eq!(scaled_value_fractional(&int(-2), 5, true), Ok(-2));
        assert_eq!(scaled_value_fractional(&string("-20%"), 5, true), Ok(-1));
    }

    #[test]
    fn fractional_parser_rejects_strings_without_percent_sign() {
        assert!(scaled_value_fractional(&string("5"), 10, true).is_err());
        assert!(scaled_value_fractional(&string("abc%"), 10, true).is_err());
        assert!(scaled_value_fractional(&string("%"), 10, true).is_err());
        assert!(scaled_value_fractional(&string("NaN%"), 10, true).is_err());
    }

    #[test]
    fn integer_parser_accepts_only_integer_percentages() {
        assert_eq!(scaled_value_integer_percent(&string("25%"), 10, true), Ok(3));
        assert_eq!(scaled_value_integer_percent(&string("25%"), 10, false), Ok(2));
        assert_eq!(scaled_value_integer_percent(&int(3), 10, false), Ok(3));
        assert!(scaled_value_integer_percent(&string("12.5%"), 8, true).is_err());
        assert!(scaled_value_integer_percent(&string("5"), 8, true).is_err());
        assert!(scaled_value_integer_percent(&string("5%%"), 8, true).is_err());
    }

    #[test]
    fn legacy_parser_treats_any_string_as_an_integer_percentage() {
        assert_eq!(legacy_value_from_int_or_percent(&string("5"), 100, true), Ok(5));
        assert_eq!(legacy_value_from_int_or_percent(&string("50"), 5, true), Ok(3));
        assert_eq!(legacy_value_from_int_or_percent(&string("5%%"), 100, true), Ok(5));
        assert_eq!(legacy_value_from_int_or_percent(&int(2), 100, true), Ok(2));
        assert!(legacy_value_from_int_or_percent(&string("12.5%"), 8, true).is_err());
        assert!(legacy_value_from_int_or_percent(&string(""), 8, true).is_err());
    }

    #[test]
    fn partition_rounds_up_and_applies_the_99_percent_rule() {
        assert_eq!(partition_replicas(5, None), Ok(0));
        assert_eq!(partition_replicas(5, Some(&int(3))), Ok(3));
        assert_eq!(partition_replicas(5, Some(&string("99%"))), Ok(4));
        assert_eq!(partition_replicas(4, Some(&string("90%"))), Ok(3));
        assert_eq!(partition_replicas(5, Some(&string("100%"))), Ok(5));
        assert_eq!(partition_replicas(5, Some(&string("1%"))), Ok(1));
        assert_eq!(partition_replicas(10, Some(&string("33.3%"))), Ok(4));
        // One replica: the rule needs more than one, so any positive percentage keeps it old.
        assert_eq!(partition_replicas(1, Some(&string("50%"))), Ok(1));
        // An integer equal to replicas is taken literally.
        assert_eq!(partition_replicas(5, Some(&int(5))), Ok(5));
    }

    #[test]
    fn partition_is_clamped_and_rejects_bare_numbers() {
        assert_eq!(partition_replicas(5, Some(&int(8))), Ok(5));
        assert_eq!(partition_replicas(5, Some(&int(-1))), Ok(0));
        assert_eq!(partition_replicas(5, Some(&string("150%"))), Ok(5));
        assert!(partition_replicas(5, Some(&string("5"))).is_err());
    }

    #[test]
    fn max_surge_rounds_up_and_is_zero_when_paused_unset_or_invalid() {
        assert_eq!(max_surge(Some(&string("30%")), 5, false), 2);
        assert_eq!(max_surge(Some(&int(3)), 5, false), 3);
        assert_eq!(max_surge(Some(&int(3)), 5, true), 0);
        assert_eq!(max_surge(None, 5, false), 0);
        assert_eq!(max_surge(Some(&string("12.5%")), 8, false), 0);
    }

    #[test]
    fn max_unavailable_rounds_up_without_surge_and_down_with_it() {
        assert_eq!(max_unavailable(None, 5, 0), 1);
        assert_eq!(max_unavailable(None, 4, 0), 1);
        assert_eq!(max_unavailable(None, 4, 1), 0);
        assert_eq!(max_unavailable(Some(&string("30%")), 5, 0), 2);
        assert_eq!(max_unavailable(Some(&string("30%")), 5, 2), 1);
        assert_eq!(max_unavailable(Some(&string("40%")), 5, 2), 2);
        assert_eq!(max_unavailable(Some(&int(3)), 5, 2), 3);
        // The webhook accepts fractional values, the controller's parser does not: it uses 0.
        assert_eq!(max_unavailable(Some(&string("12.5%")), 8, 0), 0);
    }

    #[test]
    fn scale_max_unavailable_defaults_to_unlimited_and_rounds_up() {
        assert_eq!(scale_max_unavailable(None, 5), i32::MAX);
        assert_eq!(scale_max_unavailable(Some(&int(2)), 5), 2);
        assert_eq!(scale_max_unavailable(Some(&string("30%")), 5), 2);
        assert_eq!(scale_max_unavailable(Some(&string("bad")), 5), 0);
    }
}
