//! The reference pages state facts the code knows; each is checked against the code here, so a
//! page and the code cannot drift apart.

use std::path::Path;

use cloneset_operator::core::gates::{FeatureGates, KRUISE_GATES, Stage};

mod common;

fn page(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The rows of the first table under `heading`, each split into its cells.
fn table_rows(text: &str, heading: &str) -> Vec<Vec<String>> {
    let section = text.split_once(&format!("\n{heading}\n")).unwrap_or_else(|| panic!("no {heading:?}")).1;
    let section = section.split("\n## ").next().unwrap();
    section.lines().skip_while(|l| !l.starts_with('|')).take_while(|l| l.starts_with('|')).skip(2).map(cells).collect()
}

/// A table row's cells, split at each `|` not escaped as `\|`, trimmed (an empty cell is `""`).
fn cells(row: &str) -> Vec<String> {
    let inner = row.trim().strip_prefix('|').unwrap_or(row).strip_suffix('|').unwrap_or(row);
    let mut out = vec![String::new()];
    let mut escaped = false;
    for c in inner.chars() {
        match c {
            '|' if !escaped => out.push(String::new()),
            _ => out.last_mut().unwrap().push(c),
        }
        escaped = c == '\\';
    }
    out.iter().map(|c| c.trim().to_string()).collect()
}

/// Whether `gate` is on by default: setting it on changes nothing.
fn on_by_default(name: &str) -> bool {
    let gate = KRUISE_GATES.iter().find(|g| g.name == name).unwrap();
    let mut gates = FeatureGates::default();
    gate.set(&mut gates, true);
    gates == FeatureGates::default()
}

/// docs/reference/flags.md's gate table lists every gate that changes CloneSet behaviour, with
/// Kruise's stage and the default the operator starts with; a listed gate that changes nothing
/// says so, and has no default here ("—").
#[test]
fn the_feature_gate_table_matches_the_gate_table() {
    let rows = table_rows(&page("docs/reference/flags.md"), "## Feature gates");
    let mut listed = Vec::new();
    for row in &rows {
        let [name, stage, default, effect] = &row[..] else { panic!("a gate row of four cells: {row:?}") };
        let name = name.trim_matches('`');
        let gate = KRUISE_GATES.iter().find(|g| g.name == name).unwrap_or_else(|| panic!("{name}: not one of Kruise's gates"));
        let want_stage = match gate.stage {
            Stage::Alpha => "alpha",
            Stage::Beta => "beta",
        };
        assert_eq!(stage, want_stage, "{name}: Kruise's stage");
        let effective = gate.set(&mut FeatureGates::default(), true);
        let want_default = match (effective, on_by_default(name)) {
            (false, _) => "—",
            (true, true) => "on",
            (true, false) => "off",
        };
        assert_eq!(default, want_default, "{name}: default");
        assert_eq!(
            !effect.starts_with("no effect here"),
            effective,
            "{name}: the page says it {}",
            if effective { "has no effect" } else { "has one" }
        );
        listed.push(name);
    }
    for gate in KRUISE_GATES.iter().filter(|g| g.set(&mut FeatureGates::default(), true)) {
        assert!(listed.contains(&gate.name), "{} changes CloneSet behaviour but docs/reference/flags.md does not list it", gate.name);
    }
}

/// Each flag `cloneset-operator --help` lists, with its default (`None`: none shown).
fn help_flags() -> Vec<(String, Option<String>)> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cloneset-operator")).arg("--help").output().unwrap();
    assert!(out.status.success());
    let mut flags: Vec<(String, Option<String>)> = Vec::new();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let t = line.trim_start();
        if let Some(rest) = t.strip_prefix("--").or_else(|| t.split_once(", --").map(|(_, r)| r)).filter(|_| line.starts_with("  ")) {
            let name = rest.split(['[', ' ', '=']).next().unwrap();
            flags.push((format!("--{name}"), None));
        } else if let Some((_, default)) = t.split_once("[default: ") {
            flags.last_mut().unwrap().1 = Some(default.split(']').next().unwrap().to_string());
        }
    }
    flags
}

/// docs/reference/flags.md's "Flags of `run`" lists exactly the flags `--help` lists, each with
/// the default the parser has (`unset` where it has none).
#[test]
fn the_flag_tables_match_the_argument_parser() {
    let text = page("docs/reference/flags.md");
    let section = text.split_once("\n## Flags of `run`\n").unwrap().1.split("\n## ").next().unwrap();
    let mut documented: Vec<(String, String)> = Vec::new();
    for row in section.lines().filter(|l| l.starts_with("| `-")) {
        let cells = cells(row);
        // The long name: the last of the first cell's names (`-v`, `--v`).
        let name = cells[0].split(", ").last().unwrap().trim_matches('`').to_string();
        documented.push((name, cells[1].clone()));
    }
    let help = help_flags();
    for (name, default) in &help {
        let Some((_, doc)) = documented.iter().find(|(n, _)| n == name) else {
            panic!("{name} is in --help but not in docs/reference/flags.md's flags of `run`")
        };
        match default {
            None => assert!(doc == "unset" || doc.is_empty(), "{name}: --help shows no default, the page says {doc}"),
            Some(d) => {
                let doc_value = doc.split('`').nth(1).unwrap_or_else(|| panic!("{name}: the page gives no default, --help says {d}"));
                assert_eq!(doc_value, d, "{name}: default");
            }
        }
    }
    for (name, _) in &documented {
        assert!(help.iter().any(|(n, _)| n == name), "{name} is documented but not in --help");
    }
}

/// The lines of a golden list (tests/golden/), without its `#` comments.
fn golden_lines(path: &str) -> Vec<String> {
    page(path).lines().filter(|l| !l.starts_with('#') && !l.is_empty()).map(String::from).collect()
}

/// The flags `kruise-manager` v1.9.0 registers (tests/golden/kruise-manager-v1.9.0-flags.tsv):
/// `(name, Go type, default)`.
fn kruise_flags() -> Vec<(String, String, String)> {
    golden_lines("tests/golden/kruise-manager-v1.9.0-flags.tsv")
        .iter()
        .map(|l| {
            let mut cells = l.split('\t').map(String::from);
            (cells.next().unwrap(), cells.next().unwrap(), cells.next().unwrap_or_default().trim_matches('"').to_string())
        })
        .collect()
}

/// Whether two defaults are the same value: as Go durations where both are one (`5m`, `5m0s`).
fn same_default(ours: &str, kruise: &str) -> bool {
    use cloneset_operator::config::parse_go_duration;
    ours == kruise || matches!((parse_go_duration(ours), parse_go_duration(kruise)), (Ok(a), Ok(b)) if a == b)
}

/// Every flag of `kruise-manager` v1.9.0 starts this operator: it is one of the operator's own
/// (in `--help`), or accepted without effect with its Go type (and listed so on
/// docs/reference/flags.md). An own flag Kruise has keeps Kruise's default, or its row names
/// Kruise's default beside the reason; an own flag Kruise lacks says "Not a Kruise flag".
#[test]
fn every_kruise_flag_is_accepted_as_documented() {
    use cloneset_operator::config::{FlagKind, KRUISE_FLAGS_WITHOUT_EFFECT};
    let kruise = kruise_flags();
    let help = help_flags();
    let text = page("docs/reference/flags.md");
    let run_section = text.split_once("\n## Flags of `run`\n").unwrap().1.split("\n## ").next().unwrap();
    let row_of = |name: &str| {
        run_section
            .lines()
            .find(|l| l.starts_with("| `-") && cells(l)[0].split(", ").any(|n| n.trim_matches('`') == name))
            .unwrap_or_else(|| panic!("docs/reference/flags.md has no row for {name}"))
            .to_string()
    };
    for (name, go_type, default) in &kruise {
        let flag = format!("--{name}");
        if let Some((_, ours)) = help.iter().find(|(n, _)| *n == flag) {
            let ours = ours.as_deref().unwrap_or("").trim_matches('"');
            // Go's flag help shows no default for a zero value.
            let zero = match go_type.as_str() {
                "bool" => "false",
                "int" | "uint" | "Level" => "0",
                "duration" => "0s",
                _ => "",
            };
            let default = if default.is_empty() { zero } else { default.as_str() };
            let row = row_of(&flag);
            if !same_default(ours, default) {
                assert!(
                    row.contains("Kruise") && row.contains(default),
                    "{flag}: the default here is {ours:?}, Kruise's {default:?}; its row on docs/reference/flags.md does not name Kruise's: {row}"
                );
            }
            assert!(!row.contains("Not a Kruise flag"), "{flag} is a Kruise flag; its row says it is not");
            continue;
        }
        let Some((_, kind)) = KRUISE_FLAGS_WITHOUT_EFFECT.iter().find(|(n, _)| n == name) else {
            panic!("kruise-manager has {flag}, which this operator neither has nor accepts")
        };
        let want = match go_type.as_str() {
            "bool" => FlagKind::Bool,
            "int" => FlagKind::Int,
            "uint" => FlagKind::Uint,
            "duration" => FlagKind::Duration,
            _ => FlagKind::Text,
        };
        assert_eq!(*kind, want, "{flag}: Kruise's type is {go_type}");
    }
    for (name, _) in KRUISE_FLAGS_WITHOUT_EFFECT {
        assert!(kruise.iter().any(|(n, _, _)| n == name), "--{name} is accepted as Kruise's, but kruise-manager v1.9.0 has no such flag");
    }
    let without_effect = text.split_once("\n## Kruise flags accepted without effect\n").unwrap().1.split("\n## ").next().unwrap();
    let table: String = without_effect.lines().filter(|l| l.starts_with('|')).collect();
    let mut listed: Vec<&str> = table.split('`').skip(1).step_by(2).filter_map(|n| n.strip_prefix("--")).collect();
    listed.sort_unstable();
    let mut accepted: Vec<&str> = KRUISE_FLAGS_WITHOUT_EFFECT.iter().map(|(n, _)| *n).collect();
    accepted.sort_unstable();
    assert_eq!(listed, accepted, "docs/reference/flags.md's Kruise flags accepted without effect against the parser's");
    for (flag, _) in help.iter().filter(|(n, _)| n != "--help" && n != "--version") {
        if !kruise.iter().any(|(n, _, _)| format!("--{n}") == *flag) {
            assert!(
                row_of(flag).contains("Not a Kruise flag"),
                "{flag} is not kruise-manager's; its row on docs/reference/flags.md does not say so"
            );
        }
    }
}

/// docs/development.md's map of the code names every source file: by its file name, or by its
/// stem beside its folder's name (`bench/ (flows, ...)`). A module's `mod.rs` and `tests.rs`
/// go with the module.
#[test]
fn the_map_of_the_code_names_every_file() {
    let text = page("docs/development.md");
    let map = text.split_once("\n## Map of the code\n").unwrap().1.split("\n## ").next().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let files: Vec<_> = ["src", "tests", "e2e/src"].iter().flat_map(|dir| common::files_under(&root.join(dir), "rs")).collect();
    let is_word = |w: &str| map.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-' || c == '.')).any(|x| x == w);
    let mut unnamed: Vec<String> = files
        .iter()
        .filter(|f| {
            let name = f.file_name().unwrap().to_str().unwrap();
            let stem = f.file_stem().unwrap().to_str().unwrap();
            let folder = f.parent().unwrap().file_name().unwrap().to_str().unwrap();
            !(matches!(name, "mod.rs" | "tests.rs") || is_word(name) || (is_word(stem) && map.contains(&format!("{folder}/"))))
        })
        .map(|f| f.strip_prefix(root).unwrap().display().to_string())
        .collect();
    unnamed.sort();
    assert!(unnamed.is_empty(), "docs/development.md's map of the code does not name: {unnamed:#?}");
}

/// docs/reference/metrics.md's table lists exactly the metric families `/metrics` serves, each
/// with its type (a counter by its sample name, `_total`).
#[tokio::test]
async fn the_metrics_table_matches_what_is_served() {
    use cloneset_operator::metrics::{Metrics, ReconcileResult};
    // A family is served once it has a series: one of each.
    let metrics = Metrics::new();
    let _queue = metrics.queue();
    metrics.set_max_concurrent_reconciles(3);
    metrics.active_workers(1);
    metrics.reconciled(ReconcileResult::Error, std::time::Duration::from_millis(1));
    metrics.request("127.0.0.1:6443", &http::Method::GET, "/api/v1/pods", Some(http::StatusCode::OK));
    metrics.request_latency("127.0.0.1:6443", &http::Method::GET, 0.01);
    metrics.set_status("ns", "web", [1; 6]);
    metrics.expectation_leaked("ns/web");
    metrics.set_leader(true, Some("cloneset-operator-leader"));
    let served_text = metrics.encode();
    let mut served: Vec<(String, String)> = served_text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| {
            let (name, kind) = l.split_once(' ').unwrap();
            let name = if kind == "counter" { format!("{name}_total") } else { name.to_string() };
            (name, kind.to_string())
        })
        .collect();
    served.sort();
    let mut documented: Vec<(String, String)> = Vec::new();
    for row in table_rows(&page("docs/reference/metrics.md"), "## Every metric") {
        let kind = row[1].split([',', ' ']).next().unwrap().to_string();
        for name in row[0].split(", ") {
            documented.push((name.trim_matches('`').to_string(), kind.clone()));
        }
    }
    documented.sort();
    assert_eq!(documented, served, "docs/reference/metrics.md's table against /metrics:\n{served_text}");
}

/// The value paths `schema` declares, `(path, is_leaf)`, and the Kruise-only ones it refuses (a
/// `const` that says so), by path; Helm's own `global` is neither.
fn schema_paths(schema: &serde_json::Value) -> (Vec<(String, bool)>, Vec<String>) {
    fn walk(schema: &serde_json::Value, prefix: &str, declared: &mut Vec<(String, bool)>, refused: &mut Vec<String>) {
        let Some(props) = schema.get("properties").and_then(|p| p.as_object()) else { return };
        for (key, sub) in props {
            if prefix.is_empty() && key == "global" {
                continue;
            }
            let path = if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") };
            if sub.get("const").and_then(|c| c.as_str()).is_some_and(|c| c.starts_with("Kruise-only")) {
                refused.push(path);
                continue;
            }
            declared.push((path.clone(), sub.get("properties").is_none()));
            walk(sub, &path, declared, refused);
        }
    }
    let (mut declared, mut refused) = (Vec::new(), Vec::new());
    walk(schema, "", &mut declared, &mut refused);
    (declared, refused)
}

/// The chart README's table of values: each row's value paths (`a.b` / `.c` is `a.b` and
/// `a.c`) with its "Kruise's chart" cell.
fn chart_value_rows() -> Vec<(Vec<String>, String)> {
    let mut rows = Vec::new();
    for row in table_rows(&page("charts/cloneset-operator/README.md"), "## Values") {
        let mut listed = Vec::new();
        let mut first = String::new();
        for name in row[0].split(" / ").map(|n| n.trim().trim_matches('`')) {
            if let Some(rest) = name.strip_prefix('.') {
                let parent = first.rsplit_once('.').map_or("", |(p, _)| p);
                listed.push(format!("{parent}.{rest}"));
            } else {
                first = name.to_string();
                listed.push(first.clone());
            }
        }
        rows.push((listed, row[3].clone()));
    }
    rows
}

/// Whether `path` is `ancestor` or lies under it.
fn at_or_under(path: &str, ancestor: &str) -> bool {
    path == ancestor || path.starts_with(&format!("{ancestor}."))
}

/// The chart README's table of values names every value the chart's schema declares, and
/// nothing else (a row for an object covers what is under it).
#[test]
fn the_chart_values_table_matches_the_schema() {
    let schema: serde_json::Value = serde_json::from_str(&page("charts/cloneset-operator/values.schema.json")).unwrap();
    let (paths, _) = schema_paths(&schema);
    let listed: Vec<String> = chart_value_rows().into_iter().flat_map(|(names, _)| names).collect();
    for name in &listed {
        assert!(paths.iter().any(|(p, _)| p == name), "the chart README lists {name}, which values.schema.json does not declare");
    }
    for (path, _) in paths.iter().filter(|(_, leaf)| *leaf) {
        assert!(
            listed.iter().any(|l| at_or_under(path, l)),
            "values.schema.json declares {path}, which the chart README's table of values does not list"
        );
    }
}

/// Each value of Kruise's chart (tests/golden/kruise-chart-1.9-values.txt) keeps its meaning here,
/// where the chart README's row for it (or for the object holding it) says "same key", or the
/// schema refuses it (or what holds it) with a message, and the README's list of refused keys
/// names it. A row that says "same key" names only keys Kruise's chart has.
#[test]
fn kruises_chart_values_keep_their_meaning_or_are_refused() {
    let kruise = golden_lines("tests/golden/kruise-chart-1.9-values.txt");
    let schema: serde_json::Value = serde_json::from_str(&page("charts/cloneset-operator/values.schema.json")).unwrap();
    let (_, mut refused) = schema_paths(&schema);
    let readme = page("charts/cloneset-operator/README.md");
    let refused_list = readme.split_once("\nRefused, with a message").expect("the chart README's refused keys").1;
    let refused_list = refused_list.split("\n\n").next().unwrap();
    let mut named: Vec<&str> = refused_list.split('`').skip(1).step_by(2).collect();
    named.sort_unstable();
    refused.sort_unstable();
    assert_eq!(named, refused, "the chart README's refused keys against values.schema.json's");
    let rows = chart_value_rows();
    for key in &kruise {
        if refused.iter().any(|r| at_or_under(key, r)) {
            continue;
        }
        let Some((names, cell)) = rows.iter().find(|(names, _)| names.iter().any(|n| at_or_under(key, n))) else {
            panic!("Kruise's chart has {key}: values.schema.json neither declares nor refuses it")
        };
        assert!(
            cell.starts_with("same key"),
            "Kruise's chart has {key}; the chart README's row for {names:?} says {cell:?}, not \"same key\""
        );
    }
    for (names, cell) in rows.iter().filter(|(_, cell)| cell.starts_with("same key")) {
        for name in names {
            assert!(
                kruise.iter().any(|k| at_or_under(k, name)),
                "the chart README says Kruise's chart has {name} ({cell:?}); tests/golden/kruise-chart-1.9-values.txt has no such key"
            );
        }
    }
}

/// The quoted strings of a YAML flow list (`key: ["a", "b"]`) on `line`, if it sets `key`.
fn flow_list(line: &str, key: &str) -> Option<Vec<String>> {
    let list = line.trim().strip_prefix("- ").unwrap_or(line.trim()).strip_prefix(key)?.strip_prefix(": [")?.strip_suffix(']')?;
    Some(list.split(", ").map(|s| s.trim_matches('"').to_string()).collect())
}

/// docs/operations.md's RBAC table grants each resource the verbs the chart's rbac.yaml does, and
/// names no grant the chart lacks (a resource granted twice, as leases are, has two rows).
#[test]
fn the_rbac_table_matches_the_charts_rules() {
    let mut granted: Vec<(String, Vec<String>)> = Vec::new();
    let mut resources = Vec::new();
    for line in page("charts/cloneset-operator/templates/rbac.yaml").lines() {
        if let Some(r) = flow_list(line, "resources") {
            resources = r;
        } else if let Some(mut verbs) = flow_list(line, "verbs") {
            verbs.sort();
            granted.extend(std::mem::take(&mut resources).into_iter().map(|r| (r, verbs.clone())));
        }
    }
    granted.sort();
    let mut documented: Vec<(String, Vec<String>)> = Vec::new();
    for row in table_rows(&page("docs/operations.md"), "### RBAC") {
        // The backquoted names are resources, but for an API group in brackets and a name with a dot.
        let cell = row[0].split(" (`").map(|part| part.split_once("`)").map_or(part, |(_, rest)| rest)).collect::<String>();
        let names = cell.split('`').skip(1).step_by(2).filter(|n| !n.contains('.'));
        let mut verbs: Vec<String> = row[1].split(", ").map(|v| v.split(' ').next().unwrap().to_string()).collect();
        verbs.sort();
        documented.extend(names.map(|n| (n.to_string(), verbs.clone())));
    }
    documented.sort();
    assert_eq!(documented, granted, "docs/operations.md's RBAC table (left) against charts/cloneset-operator/templates/rbac.yaml");
}

/// The measured figures in `text`: a number before `MiB` or `s`, or one ending in `×`.
fn figures(text: &str) -> Vec<String> {
    let words: Vec<&str> = text.split_whitespace().map(|w| w.trim_matches(|c: char| "()*,;:|".contains(c))).collect();
    let mut out = Vec::new();
    for (i, w) in words.iter().enumerate() {
        if !w.starts_with(|c: char| c.is_ascii_digit()) {
            continue;
        }
        if w.ends_with('×') {
            out.push(w.to_string());
        } else if let Some(&unit @ ("MiB" | "s")) = words.get(i + 1) {
            out.push(format!("{w} {unit}"));
        }
    }
    out
}

/// The README's performance figures are docs/performance.md's, where each has its date, revision
/// and command: a figure the README quotes is one the page states.
#[test]
fn the_readmes_figures_are_the_performance_pages() {
    let readme = page("README.md");
    let stated = figures(&page("docs/performance.md"));
    let section =
        |heading: &str| readme.split_once(heading).unwrap_or_else(|| panic!("no {heading:?}")).1.split("\n## ").next().unwrap().to_string();
    let quoted: Vec<String> = ["## Why switch\n", "## Performance at a glance\n"].iter().flat_map(|h| figures(&section(h))).collect();
    assert!(quoted.len() >= 10, "the figures found in the README: {quoted:?}");
    let missing: Vec<&String> = quoted.iter().filter(|f| !stated.contains(f)).collect();
    assert!(missing.is_empty(), "the README quotes figures docs/performance.md does not state: {missing:?}");
}
