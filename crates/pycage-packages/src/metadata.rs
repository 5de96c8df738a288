//! What an installer put into a staging directory: each distribution's
//! name, version and requirements, read from its `*.dist-info/METADATA`
//! (bounded reads; nothing of the packages is run), and the set a list of
//! root requirements reaches through them.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::Path;

use crate::requirement::normalize;

/// Most bytes of one `METADATA` file read (the headers come first; the
/// long description after them is not needed).
const MAX_METADATA: u64 = 256 * 1024;
/// Most distributions one install may bring.
pub const MAX_DISTRIBUTIONS: usize = 1024;

/// One installed distribution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dist {
    /// PEP 503-normalized.
    pub name: String,
    pub version: String,
    /// Its `Requires-Dist` lines: the normalized name, and the extra the
    /// line is under (`; extra == "x"`), if any.
    pub requires: Vec<(String, Option<String>)>,
}

/// The distributions in `site` (an installer's `--target`), by name.
/// `None` when more than [`MAX_DISTRIBUTIONS`] are there.
pub fn installed(site: &Path) -> std::io::Result<Option<BTreeMap<String, Dist>>> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(site)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !name.ends_with(".dist-info") || !entry.file_type()?.is_dir() {
            continue;
        }
        if out.len() >= MAX_DISTRIBUTIONS {
            return Ok(None);
        }
        let mut text = String::new();
        let file = std::fs::File::open(entry.path().join("METADATA"))?;
        file.take(MAX_METADATA).read_to_string(&mut text)?;
        if let Some(dist) = parse_metadata(&text) {
            out.insert(dist.name.clone(), dist);
        }
    }
    Ok(Some(out))
}

/// The `Name`, `Version` and `Requires-Dist` headers of a `METADATA` file
/// (RFC 822 style: headers end at the first empty line).
pub fn parse_metadata(text: &str) -> Option<Dist> {
    let (mut name, mut version, mut requires) = (None, None, Vec::new());
    for line in text.lines() {
        if line.is_empty() {
            break;
        }
        let Some((key, value)) = line.split_once(':') else { continue };
        let value = value.trim();
        match key.trim().to_ascii_lowercase().as_str() {
            "name" => name = Some(normalize(value)),
            "version" => version = Some(value.to_owned()),
            "requires-dist" => requires.push(requires_dist(value)),
            _ => {}
        }
    }
    Some(Dist { name: name.filter(|n| !n.is_empty())?, version: version?, requires })
}

/// A `Requires-Dist` value: the name it requires, and the extra it is
/// under (`; extra == "x"` in its marker), if any.
fn requires_dist(value: &str) -> (String, Option<String>) {
    let end = value.find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))).unwrap_or(value.len());
    let name = normalize(value.get(..end).unwrap_or_default());
    let extra = value.split_once(';').and_then(|(_, marker)| {
        let at = marker.find("extra")?;
        let rest = marker.get(at + 5..)?.trim_start().strip_prefix("==")?.trim_start();
        let quote = rest.chars().next().filter(|c| *c == '"' || *c == '\'')?;
        let inner = rest.get(1..)?;
        Some(normalize(inner.get(..inner.find(quote)?)?))
    });
    (name, extra)
}

/// The names `roots` (name and extras) reach through `dists`' requirements:
/// a requirement under an extra counts only when that extra was asked
/// for. Iterative.
pub fn closure(roots: &[(String, Vec<String>)], dists: &BTreeMap<String, Dist>) -> BTreeSet<String> {
    let mut reached: BTreeSet<String> = BTreeSet::new();
    let mut wanted: BTreeSet<(String, Option<String>)> = BTreeSet::new();
    let mut stack: Vec<(String, Vec<String>)> = roots.to_vec();
    while let Some((name, extras)) = stack.pop() {
        let first = reached.insert(name.clone());
        let Some(dist) = dists.get(&name) else { continue };
        let new_extras: Vec<String> =
            extras.into_iter().filter(|e| wanted.insert((name.clone(), Some(e.clone())))).collect();
        for (dep, extra) in &dist.requires {
            let applies = match extra {
                None => first,
                Some(e) => new_extras.contains(e),
            };
            if applies && !reached.contains(dep) {
                stack.push((dep.clone(), Vec::new()));
            }
        }
    }
    reached
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dist(name: &str, requires: &[(&str, Option<&str>)]) -> (String, Dist) {
        let requires = requires.iter().map(|(n, e)| ((*n).to_owned(), e.map(str::to_owned))).collect();
        (name.to_owned(), Dist { name: name.to_owned(), version: "1".into(), requires })
    }

    #[test]
    fn metadata_headers() {
        let text = "Metadata-Version: 2.1\nName: Num2Words\nVersion: 0.5.13\nRequires-Dist: docopt (>=0.6.2)\n\
                    Requires-Dist: wcwidth ; extra == 'widechars'\nRequires-Dist: x; python_version < \"3\"\n\n\
                    Requires-Dist: in-the-body\n";
        let d = parse_metadata(text).unwrap();
        assert_eq!(d.name, "num2words");
        assert_eq!(d.version, "0.5.13");
        assert_eq!(
            d.requires,
            vec![("docopt".into(), None), ("wcwidth".into(), Some("widechars".into())), ("x".into(), None)]
        );
        assert_eq!(parse_metadata("Name: x\n"), None, "no version");
    }

    #[test]
    fn the_closure_follows_extras_only_when_asked() {
        let dists: BTreeMap<_, _> = [
            dist("tabulate", &[("wcwidth", Some("widechars"))]),
            dist("wcwidth", &[]),
            dist("num2words", &[("docopt", None)]),
            dist("docopt", &[]),
        ]
        .into_iter()
        .collect();
        let names = |roots: &[(&str, &[&str])]| {
            let roots: Vec<(String, Vec<String>)> =
                roots.iter().map(|(n, e)| ((*n).to_owned(), e.iter().map(|s| (*s).to_owned()).collect())).collect();
            closure(&roots, &dists).into_iter().collect::<Vec<_>>()
        };
        assert_eq!(names(&[("tabulate", &[])]), ["tabulate"]);
        assert_eq!(names(&[("tabulate", &["widechars"])]), ["tabulate", "wcwidth"]);
        assert_eq!(names(&[("num2words", &[])]), ["docopt", "num2words"]);
        // A cycle ends.
        let cyclic: BTreeMap<_, _> = [dist("a", &[("b", None)]), dist("b", &[("a", None)])].into_iter().collect();
        let roots = vec![("a".to_owned(), Vec::new())];
        assert_eq!(closure(&roots, &cyclic).len(), 2);
    }
}
