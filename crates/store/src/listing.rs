//! Listing with prefix, delimiter and pagination over a sorted map of keys. Pure: keys are
//! strings in byte order (S3's UTF-8 binary order); nothing here assumes a file system, so
//! `a/b` and `a/b/c` are two keys like any others.

use crate::types::{ListPage, ListQuery};
use std::collections::BTreeMap;
use std::ops::Bound;

/// The smallest string greater than every string that starts with `p` (`None`: there is none,
/// `p` being all `char::MAX`).
fn successor(p: &str) -> Option<String> {
    let mut chars: Vec<char> = p.chars().collect();
    while let Some(last) = chars.pop() {
        let next = match last as u32 {
            0xD7FF => Some('\u{E000}'),
            c => char::from_u32(c + 1),
        };
        if let Some(n) = next {
            chars.push(n);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

/// The common prefix `key` rolls up into, if any.
pub(crate) fn rolled_up<'k>(
    key: &'k str,
    prefix: &str,
    delimiter: Option<&str>,
) -> Option<&'k str> {
    let d = delimiter.filter(|d| !d.is_empty())?;
    let rest = key.get(prefix.len()..)?;
    rest.find(d).map(|i| &key[..prefix.len() + i + d.len()])
}

/// One page of `q` over `keys`; `entry` turns a key's value into its listing entry.
pub(crate) fn list<V, E>(
    keys: &BTreeMap<String, V>,
    q: &ListQuery,
    entry: impl Fn(&str, &V) -> E,
) -> (Vec<E>, ListPage) {
    let delimiter = q.delimiter.as_deref();
    // Where to start: at the prefix, or after `after` — past the whole common prefix when
    // `after` is one (it was returned as such on the previous page).
    let mut from: Bound<String> = Bound::Included(q.prefix.clone());
    if let Some(after) = q.after.as_deref().filter(|a| *a >= q.prefix.as_str()) {
        from = match rolled_up(after, &q.prefix, delimiter) {
            Some(cp) if cp.len() == after.len() => match successor(after) {
                Some(s) => Bound::Included(s),
                None => return (Vec::new(), ListPage::default()),
            },
            _ => Bound::Excluded(after.to_string()),
        };
    }
    let mut objects = Vec::new();
    let mut page = ListPage::default();
    let mut last: Option<String> = None;
    while let Some((key, value)) = keys.range((from.clone(), Bound::Unbounded)).next() {
        if !key.starts_with(&q.prefix) {
            break;
        }
        if objects.len() + page.prefixes.len() >= q.max_keys {
            page.truncated = true;
            page.next_after = last;
            break;
        }
        match rolled_up(key, &q.prefix, delimiter) {
            Some(cp) => {
                page.prefixes.push(cp.to_string());
                last = Some(cp.to_string());
                match successor(cp) {
                    Some(s) => from = Bound::Included(s),
                    None => break,
                }
            }
            None => {
                objects.push(entry(key, value));
                last = Some(key.clone());
                from = Bound::Excluded(key.clone());
            }
        }
    }
    (objects, page)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn run(keys: &[&str], prefix: &str, delim: Option<&str>, max: usize) -> Vec<String> {
        let map: BTreeMap<String, ()> = keys.iter().map(|k| (k.to_string(), ())).collect();
        let mut out = Vec::new();
        let mut after = None;
        loop {
            let q = ListQuery {
                prefix: prefix.into(),
                delimiter: delim.map(str::to_string),
                after: after.clone(),
                max_keys: max,
            };
            let (objs, page) = list(&map, &q, |k, _| k.to_string());
            assert!(objs.len() + page.prefixes.len() <= max);
            out.extend(objs.into_iter().map(|k| format!("o:{k}")));
            out.extend(page.prefixes.iter().map(|p| format!("p:{p}")));
            if !page.truncated {
                break;
            }
            after = page.next_after;
            assert!(after.is_some());
        }
        out
    }

    #[test]
    fn a_key_and_its_longer_sibling_coexist() {
        let keys = ["a/b", "a/b/c", "a/bc", "a/b/d/e", "b"];
        assert_eq!(
            run(&keys, "a/", Some("/"), 1000),
            ["o:a/b", "o:a/bc", "p:a/b/"]
        );
        assert_eq!(
            run(&keys, "a/b", Some("/"), 1000),
            ["o:a/b", "o:a/bc", "p:a/b/"]
        );
        assert_eq!(run(&keys, "", Some("/"), 1000), ["o:b", "p:a/"]);
        assert_eq!(run(&keys, "a/b/", None, 1), ["o:a/b/c", "o:a/b/d/e"]);
    }

    #[test]
    fn pagination_never_repeats_a_common_prefix() {
        let keys = ["a/1", "a/2", "a/3", "b", "c/1", "d"];
        assert_eq!(run(&keys, "", Some("/"), 1), ["p:a/", "o:b", "p:c/", "o:d"]);
        assert_eq!(run(&keys, "", Some("/"), 3), ["o:b", "p:a/", "p:c/", "o:d"]);
    }

    #[test]
    fn successor_bounds_every_extension() {
        assert_eq!(successor("a/").as_deref(), Some("a0"));
        assert_eq!(successor("\u{D7FF}").as_deref(), Some("\u{E000}"));
        assert_eq!(successor("a\u{10FFFF}").as_deref(), Some("b"));
        assert_eq!(successor("\u{10FFFF}"), None);
    }

    /// Lists every page and compares with a direct computation of what S3 returns.
    fn model(keys: &[String], prefix: &str, delim: Option<&str>) -> Vec<String> {
        let mut sorted: Vec<&String> = keys.iter().collect();
        sorted.sort();
        sorted.dedup();
        let mut items: Vec<(String, String)> = Vec::new();
        for k in sorted {
            if !k.starts_with(prefix) {
                continue;
            }
            match rolled_up(k, prefix, delim) {
                Some(cp) => {
                    if !items.iter().any(|(_, x)| x == &format!("p:{cp}")) {
                        items.push((cp.to_string(), format!("p:{cp}")));
                    }
                }
                None => items.push((k.clone(), format!("o:{k}"))),
            }
        }
        items.sort();
        let mut objs: Vec<String> = items
            .iter()
            .filter(|(_, s)| s.starts_with("o:"))
            .map(|(_, s)| s.clone())
            .collect();
        objs.extend(
            items
                .iter()
                .filter(|(_, s)| s.starts_with("p:"))
                .map(|(_, s)| s.clone()),
        );
        objs
    }

    proptest! {
        #[test]
        fn pages_add_up_to_the_whole_listing(
            keys in proptest::collection::vec("[ab/]{0,5}", 0..40),
            prefix in "[ab/]{0,2}",
            slash in any::<bool>(),
            max in 1usize..5,
        ) {
            let keys: Vec<String> = keys.into_iter().filter(|k| !k.is_empty()).collect();
            let delim = slash.then_some("/");
            let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
            let mut got = run(&refs, &prefix, delim, max);
            // Pages interleave objects and prefixes; compare as sets in their kinds' order.
            let mut want = model(&keys, &prefix, delim);
            got.sort();
            want.sort();
            prop_assert_eq!(got, want);
        }
    }
}
