//! Typed indices into the scheduler's tables, so that a class's index cannot pick a
//! template, nor a type's an offer key (Karpenter's scheduler holds pointers to its pods,
//! NodeClaims and templates instead).

use std::marker::PhantomData;
use std::ops::{Index, IndexMut};

use crate::decide::provisioning::templates::{Template, TypeOption};

/// An index into one kind of table.
pub(super) trait Id: Copy {
    /// The id of the row at `index`.
    fn from_index(index: usize) -> Self;
    /// The row it names.
    fn index(self) -> usize;
}

macro_rules! ids {
    ($($(#[$doc:meta])* $name:ident;)*) => {$(
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub(super) struct $name(usize);

        impl Id for $name {
            fn from_index(index: usize) -> Self {
                $name(index)
            }
            fn index(self) -> usize {
                self.0
            }
        }
    )*};
}

ids! {
    /// A pending pod.
    PodId;
    /// A class of pods that schedule alike.
    ClassId;
    /// A NodePool's template.
    TemplateId;
    /// One of a template's instance types: a row of [`Template::types`].
    TypeId;
    /// One of a template's offer keys (a zone and a capacity type).
    OfferKeyId;
    /// A planned new node.
    NewNodeId;
}

/// A `Vec` indexed by one kind of id.
pub(super) struct IdVec<I, T> {
    items: Vec<T>,
    id: PhantomData<fn(I) -> I>,
}

impl<I: Id, T> IdVec<I, T> {
    /// An empty table.
    pub(super) fn new() -> Self {
        IdVec {
            items: Vec::new(),
            id: PhantomData,
        }
    }

    /// Rows.
    pub(super) fn len(&self) -> usize {
        self.items.len()
    }

    /// The id the next row pushed will get.
    pub(super) fn next_id(&self) -> I {
        I::from_index(self.items.len())
    }

    /// Appends a row and returns its id.
    pub(super) fn push(&mut self, item: T) -> I {
        let id = self.next_id();
        self.items.push(item);
        id
    }

    /// Removes the last row.
    pub(super) fn pop(&mut self) -> Option<T> {
        self.items.pop()
    }

    /// Every id, in order.
    pub(super) fn ids(&self) -> impl Iterator<Item = I> + use<I, T> {
        (0..self.items.len()).map(I::from_index)
    }

    /// Every row, in order.
    pub(super) fn iter(&self) -> std::slice::Iter<'_, T> {
        self.items.iter()
    }

    /// Every row, in order, to change.
    pub(super) fn iter_mut(&mut self) -> std::slice::IterMut<'_, T> {
        self.items.iter_mut()
    }

    /// Every row with its id, in order.
    pub(super) fn enumerate(&self) -> impl Iterator<Item = (I, &T)> {
        self.items.iter().enumerate().map(|(i, t)| (I::from_index(i), t))
    }

    /// The rows, as a `Vec`.
    pub(super) fn into_vec(self) -> Vec<T> {
        self.items
    }
}

impl<I: Id, T> Default for IdVec<I, T> {
    fn default() -> Self {
        IdVec::new()
    }
}

impl<I: Id, T> FromIterator<T> for IdVec<I, T> {
    fn from_iter<It: IntoIterator<Item = T>>(iter: It) -> Self {
        IdVec {
            items: iter.into_iter().collect(),
            id: PhantomData,
        }
    }
}

impl<I: Id, T> Index<I> for IdVec<I, T> {
    type Output = T;
    fn index(&self, id: I) -> &T {
        &self.items[id.index()]
    }
}

impl<I: Id, T> IndexMut<I> for IdVec<I, T> {
    fn index_mut(&mut self, id: I) -> &mut T {
        &mut self.items[id.index()]
    }
}

/// A template's types by [`TypeId`].
pub(super) trait Types {
    /// The type `id`.
    fn ty(&self, id: TypeId) -> &TypeOption;
}

impl Types for Template {
    fn ty(&self, id: TypeId) -> &TypeOption {
        &self.types[id.index()]
    }
}

/// Every type's id of a template, in order.
pub(super) fn type_ids(t: &Template) -> impl Iterator<Item = TypeId> + use<> {
    (0..t.types.len()).map(TypeId::from_index)
}
