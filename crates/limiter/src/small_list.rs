//! [`SmallList`]: a list that keeps its usual single element inline.

/// A list that keeps its usual single element inline, without an allocation, and moves to a
/// `Vec` from the second: a plan's checks (the usual request meets at most one rule) and a
/// decision API's items (the usual request names one rule and key).
#[derive(Debug, Clone, Default)]
pub enum SmallList<T> {
    /// No element.
    #[default]
    Empty,
    /// One element, inline.
    One([T; 1]),
    /// Any number of elements.
    Many(Vec<T>),
}

impl<T> SmallList<T> {
    /// Appends `item`.
    pub fn push(&mut self, item: T) {
        *self = match std::mem::take(self) {
            SmallList::Empty => SmallList::One([item]),
            SmallList::One([first]) => SmallList::Many(vec![first, item]),
            SmallList::Many(mut many) => {
                many.push(item);
                SmallList::Many(many)
            }
        };
    }
}

impl<T> std::ops::Deref for SmallList<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        match self {
            SmallList::Empty => &[],
            SmallList::One(one) => one,
            SmallList::Many(many) => many,
        }
    }
}

impl<T> std::ops::DerefMut for SmallList<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match self {
            SmallList::Empty => &mut [],
            SmallList::One(one) => one,
            SmallList::Many(many) => many,
        }
    }
}

impl<T: PartialEq> PartialEq for SmallList<T> {
    /// Equal when the elements are, however they are kept (one inline or in a `Vec`).
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl<T: Eq> Eq for SmallList<T> {}

impl<T> IntoIterator for SmallList<T> {
    type Item = T;
    type IntoIter = std::vec::IntoIter<T>;

    /// The elements in order (one inline element moves into a `Vec` of one).
    fn into_iter(self) -> Self::IntoIter {
        match self {
            SmallList::Empty => Vec::new().into_iter(),
            SmallList::One([one]) => vec![one].into_iter(),
            SmallList::Many(many) => many.into_iter(),
        }
    }
}

impl<T> Extend<T> for SmallList<T> {
    fn extend<I: IntoIterator<Item = T>>(&mut self, items: I) {
        for item in items {
            self.push(item);
        }
    }
}

impl<T> From<Vec<T>> for SmallList<T> {
    fn from(many: Vec<T>) -> Self {
        SmallList::Many(many)
    }
}

#[cfg(test)]
mod tests {
    use super::SmallList;

    #[test]
    fn one_element_stays_inline_then_many() {
        let mut list = SmallList::default();
        assert!(list.is_empty());
        list.push(1);
        assert!(matches!(list, SmallList::One([1])));
        list.push(2);
        list.push(3);
        assert_eq!(&*list, &[1, 2, 3]);
        list[0] = 7;
        assert_eq!(list.first(), Some(&7));
    }

    #[test]
    fn equality_is_of_the_elements_not_the_storage() {
        let mut inline = SmallList::default();
        inline.push(1);
        assert_eq!(inline, SmallList::from(vec![1]));
        assert_ne!(inline, SmallList::from(vec![1, 2]));
        assert_eq!(SmallList::<u8>::Empty, SmallList::from(Vec::new()));
    }
}
