//! Kruise's feature gates: which exist (v1.9.0's table) and the ones that change what the
//! core decides. Parsing them from flags is configuration's job (`crate::config`).

/// Kruise's feature gates that change CloneSet behaviour, with Kruise's production defaults
/// (all off but `InPlaceUpdateEnvFromMetadata`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeatureGates {
    /// Pods' `controller-revision-hash` carries only the hash.
    pub cloneset_short_hash: bool,
    /// Raising partition rolls pods back to the current revision.
    pub cloneset_partition_rollback: bool,
    /// PreparingUpdate pods count as updated when scaling.
    pub preparing_update_as_update: bool,
    /// A volumeClaimTemplates change forces recreate (not for InPlaceOnly).
    pub recreate_pod_when_change_vct: bool,
    /// Resources can be updated in place.
    pub in_place_workload_vertical_scaling: bool,
    /// Timed-out scale expectations are dropped instead of blocking the CloneSet.
    pub force_delete_timeout_expectation: bool,
    /// The pod template is hashed (and pods are built from it) as written, without the
    /// Kubernetes defaults Kruise's webhook fills in.
    pub template_no_defaults: bool,
    /// A template change that alters a label or annotation a container's env reads through the
    /// downward API is made in place only where kruise-daemon restarts the container; elsewhere
    /// it takes a new pod (a running container never sees the new value).
    pub in_place_update_env_from_metadata: bool,
}

impl Default for FeatureGates {
    fn default() -> Self {
        Self {
            cloneset_short_hash: false,
            cloneset_partition_rollback: false,
            preparing_update_as_update: false,
            recreate_pod_when_change_vct: false,
            in_place_workload_vertical_scaling: false,
            force_delete_timeout_expectation: false,
            template_no_defaults: false,
            in_place_update_env_from_metadata: true,
        }
    }
}

/// Where a gate's value lives in [`FeatureGates`].
type GateField = fn(&mut FeatureGates) -> &mut bool;

/// A gate's maturity in Kruise, which decides what `AllAlpha` / `AllBeta` turn on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    Alpha,
    Beta,
}

/// One of Kruise v1.9.0's feature gates (`pkg/features/kruise_features.go`).
pub struct Gate {
    /// The name exactly as Kruise spells it on the command line.
    pub name: &'static str,
    pub stage: Stage,
    /// Where it lives in [`FeatureGates`]; `None`: accepted, but nothing here depends on it.
    field: Option<GateField>,
}

const fn gate(name: &'static str, stage: Stage, field: Option<GateField>) -> Gate {
    Gate { name, stage, field }
}

impl Gate {
    /// Sets this gate in `gates`; `false` when nothing here depends on it.
    pub fn set(&self, gates: &mut FeatureGates, value: bool) -> bool {
        self.field.map(|field| *field(gates) = value).is_some()
    }
}

/// All 34 of Kruise v1.9.0's gates. Those with a field change CloneSet behaviour here; the
/// others belong to kruise-daemon, Kruise's pod webhook or its other workloads.
pub const KRUISE_GATES: &[Gate] = &[
    gate("PodWebhook", Stage::Beta, None),
    gate("KruiseDaemon", Stage::Beta, None),
    gate("DaemonWatchingPod", Stage::Beta, None),
    gate("CloneSetShortHash", Stage::Alpha, Some(|g| &mut g.cloneset_short_hash)),
    gate("KruisePodReadinessGate", Stage::Alpha, None),
    gate("PreDownloadImageForInPlaceUpdate", Stage::Alpha, None),
    gate("CloneSetPartitionRollback", Stage::Alpha, Some(|g| &mut g.cloneset_partition_rollback)),
    gate("ResourcesDeletionProtection", Stage::Beta, None),
    gate("WorkloadSpread", Stage::Beta, None),
    gate("PodUnavailableBudgetDeleteGate", Stage::Beta, None),
    gate("PodUnavailableBudgetUpdateGate", Stage::Alpha, None),
    gate("TemplateNoDefaults", Stage::Alpha, Some(|g| &mut g.template_no_defaults)),
    gate("InPlaceUpdateEnvFromMetadata", Stage::Beta, Some(|g| &mut g.in_place_update_env_from_metadata)),
    gate("StatefulSetAutoDeletePVC", Stage::Beta, None),
    gate("SidecarSetPatchPodMetadataDefaultsAllowed", Stage::Alpha, None),
    gate("SidecarTerminator", Stage::Alpha, None),
    gate("PodProbeMarkerGate", Stage::Beta, None),
    gate("PreDownloadImageForDaemonSetUpdate", Stage::Alpha, None),
    gate("CloneSetEventHandlerOptimization", Stage::Alpha, None),
    gate("PreparingUpdateAsUpdate", Stage::Alpha, Some(|g| &mut g.preparing_update_as_update)),
    gate("ImagePullJobGate", Stage::Alpha, None),
    gate("ResourceDistributionGate", Stage::Alpha, None),
    gate("DeletionProtectionForCRDCascadingGate", Stage::Alpha, None),
    gate("EnhancedLivenessProbe", Stage::Alpha, None),
    gate("RecreatePodWhenChangeVCTInCloneSetGate", Stage::Alpha, Some(|g| &mut g.recreate_pod_when_change_vct)),
    gate("StatefulSetStartOrdinal", Stage::Alpha, None),
    gate("PodIndexLabel", Stage::Beta, None),
    gate("EnableExternalCerts", Stage::Alpha, None),
    gate("StatefulSetAutoResizePVCGate", Stage::Alpha, None),
    gate("ForceDeleteTimeoutExpectationGate", Stage::Alpha, Some(|g| &mut g.force_delete_timeout_expectation)),
    gate("InPlaceWorkloadVerticalScaling", Stage::Alpha, Some(|g| &mut g.in_place_workload_vertical_scaling)),
    gate("EnablePodProbeMarkerOnServerless", Stage::Alpha, None),
    gate("EnableSortSidecarContainerByName", Stage::Alpha, None),
    gate("InPlacePodVerticalScaling", Stage::Alpha, None),
];

/// CloneSet gates whose behaviour is not implemented yet: turning one on is accepted (so Kruise's
/// `AllAlpha=true` works) and logged, and CloneSets behave as with the gate off.
pub(crate) const NOT_IMPLEMENTED_GATES: &[&str] = &[];
