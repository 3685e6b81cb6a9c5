//! CEL rules and schema pieces both served versions of the CloneSet CRD share, written once.

use schemars::{Schema, SchemaGenerator, json_schema};

/// Schema of a field kept schemaless, as Kruise's `+kubebuilder:validation:Schemaless`.
pub(crate) fn schemaless(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "x-kubernetes-preserve-unknown-fields": true })
}

/// A CEL fragment: true when the int-or-string `x` scales to zero for any replica count.
macro_rules! int_or_percent_is_zero {
    ($x:literal) => {
        concat!("(type(", $x, ") == int ? ", $x, " == 0 : double(string(", $x, ").replace('%', '')) == 0.0)")
    };
}
pub(crate) use int_or_percent_is_zero;

/// The int-or-percentage rule Kruise's webhook applies to partition, maxUnavailable and maxSurge:
/// a non-negative integer, or a non-negative (possibly fractional) percentage such as `"33.3%"`.
/// A plain numeric string such as `"5"` is rejected.
pub(crate) const NON_NEGATIVE_INT_OR_PERCENT: &str =
    r"type(self) == int ? self >= 0 : string(self).matches('^([0-9]+\\.?[0-9]*|\\.[0-9]+)%$')";
pub(crate) const NON_NEGATIVE_INT_OR_PERCENT_MESSAGE: &str = "must be a non-negative integer or percentage, e.g. 5 or \"20%\"";

pub(crate) const SELECTOR_NOT_EMPTY: &str =
    "(has(self.matchLabels) && size(self.matchLabels) > 0) || (has(self.matchExpressions) && size(self.matchExpressions) > 0)";
pub(crate) const SELECTOR_NOT_EMPTY_MESSAGE: &str = "empty selector is invalid for cloneset";

pub(crate) const SELECTOR_OPERATORS: &str = "!has(self.matchExpressions) || self.matchExpressions.all(e, e.operator == 'In' || e.operator == 'NotIn' ? has(e.values) && size(e.values) > 0 : (e.operator == 'Exists' || e.operator == 'DoesNotExist') && (!has(e.values) || size(e.values) == 0))";
pub(crate) const SELECTOR_OPERATORS_MESSAGE: &str =
    "matchExpressions: operator must be In, NotIn, Exists or DoesNotExist; In and NotIn need values, Exists and DoesNotExist take none";

pub(crate) const IMMUTABLE_MESSAGE: &str = "field is immutable: updates to cloneset spec for fields other than 'replicas', 'template', 'lifecycle', 'scaleStrategy', 'updateStrategy', 'minReadySeconds', 'volumeClaimTemplates', 'revisionHistoryLimit' and 'progressDeadlineSeconds' are forbidden";

pub(crate) const PROGRESS_DEADLINE: &str = "!has(self.progressDeadlineSeconds) || self.progressDeadlineSeconds == 2147483647 || self.progressDeadlineSeconds > (has(self.minReadySeconds) ? self.minReadySeconds : 0)";
pub(crate) const PROGRESS_DEADLINE_MESSAGE: &str = "must be greater than minReadySeconds";

pub(crate) const BOTH_ZERO_MESSAGE: &str = "maxUnavailable and maxSurge should not both be less than 1";
