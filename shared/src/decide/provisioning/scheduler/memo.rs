//! What a run remembers of each NodePool, so that a class is matched against its offer
//! keys and types once per relaxation level, not once per pod (Karpenter evaluates a
//! template's instance types for each pod, `filterInstanceTypesByRequirements`; Carpool's
//! classes let it keep the answers): the candidates that take a pod of the class alone,
//! the types worth evaluating as a target, and whether a class matches a type.

use std::collections::HashMap;
use std::rc::Rc;

use crate::decide::provisioning::scheduler::candidates::Candidates;
use crate::decide::provisioning::scheduler::index::{ClassId, OfferKeyId, TypeId};
use crate::decide::provisioning::unschedulable::Reason;

/// Types worth evaluating, with their prices.
pub(super) type Shortlist = Vec<(TypeId, f64)>;

/// A class at a relaxation level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct FitKey {
    /// The class.
    pub(super) class: ClassId,
    /// The level (an index into the class's levels).
    pub(super) level: usize,
}

/// A class at a relaxation level, against one offer key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct ShortlistKey {
    /// The class.
    pub(super) class: ClassId,
    /// The level (an index into the class's levels).
    pub(super) level: usize,
    /// The offer key.
    pub(super) offer: OfferKeyId,
}

/// A class at a relaxation level, against one type under one offer key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct MatchKey {
    /// The class.
    pub(super) class: ClassId,
    /// The level (an index into the class's levels).
    pub(super) level: usize,
    /// The type.
    pub(super) ty: TypeId,
    /// The offer key.
    pub(super) offer: OfferKeyId,
}

/// One NodePool's memo tables.
#[derive(Default)]
pub(super) struct Memo {
    /// Per class and level: the offer keys and types that take the pod alone; `Err` holds
    /// why none does.
    pub(super) candidates: HashMap<FitKey, Rc<Result<Candidates, Reason>>>,
    /// Per class, level and offer key: the types worth evaluating for the class.
    pub(super) shortlists: HashMap<ShortlistKey, Rc<Shortlist>>,
    /// Per class, level, type and offer key: whether the class's branches match.
    pub(super) matches: HashMap<MatchKey, bool>,
}
