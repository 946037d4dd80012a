//! The workload of `bench kv`: value sizes and operation mixes, each a pure function of the
//! seed and the key's id, so a run replays exactly.

use super::*;

/// Value sizes with weights; each key's size is a pure function of its id.
#[derive(Debug, Clone)]
pub(super) struct Sizes {
    pub(super) choices: Vec<(usize, u64)>,
    pub(super) total: u64,
    pub(super) text: String,
}

impl Sizes {
    pub(super) fn parse(value_size: &str, mix: Option<&str>) -> Result<Sizes> {
        let mut choices = Vec::new();
        match mix {
            None => choices.push((parse_bytes(value_size)? as usize, 1)),
            Some(m) => {
                for part in m.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                    let (size, weight) = part
                        .split_once(':')
                        .with_context(|| format!("{part:?}: expected SIZE:WEIGHT"))?;
                    let w: u64 = weight
                        .trim()
                        .parse()
                        .with_context(|| format!("{part:?}: weight is not a number"))?;
                    if w > 0 {
                        choices.push((parse_bytes(size)? as usize, w));
                    }
                }
            }
        }
        ensure!(!choices.is_empty(), "no value size with a positive weight");
        ensure!(
            choices.iter().all(|c| c.0 > 0),
            "value sizes must be positive"
        );
        let text = match mix {
            None => human_bytes(choices[0].0 as u64),
            Some(_) => choices
                .iter()
                .map(|(s, w)| format!("{}:{w}", human_bytes(*s as u64)))
                .collect::<Vec<_>>()
                .join(","),
        };
        Ok(Sizes {
            total: choices.iter().map(|c| c.1).sum(),
            choices,
            text,
        })
    }

    pub(super) fn of(&self, id: u64, seed: u64) -> usize {
        if self.choices.len() == 1 {
            return self.choices[0].0;
        }
        let mut x = splitmix(id ^ seed.rotate_left(29)) % self.total;
        for &(size, w) in &self.choices {
            if x < w {
                return size;
            }
            x -= w;
        }
        self.choices[self.choices.len() - 1].0
    }

    pub(super) fn max(&self) -> usize {
        self.choices.iter().map(|c| c.0).max().unwrap_or(0)
    }

    pub(super) fn mean(&self) -> f64 {
        self.choices
            .iter()
            .map(|&(s, w)| s as f64 * w as f64)
            .sum::<f64>()
            / self.total as f64
    }
}

pub(super) fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

pub(super) const READ: usize = 0;
pub(super) const INSERT: usize = 1;
pub(super) const UPDATE: usize = 2;
pub(super) const DELETE: usize = 3;
pub(super) const OP_NAMES: [&str; 4] = ["read", "insert", "update", "delete"];

/// Weights of the four operations in a run phase.
#[derive(Debug, Clone)]
pub(super) struct Mix {
    pub(super) weights: [u64; 4],
    pub(super) text: String,
}

impl Mix {
    pub(super) fn parse(s: &str) -> Result<Mix> {
        let mut weights = [0u64; 4];
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, w) = part
                .split_once('=')
                .with_context(|| format!("mix entry {part:?}: expected NAME=WEIGHT"))?;
            let op = match name.trim().to_ascii_lowercase().as_str() {
                "read" | "get" | "retrieve" => READ,
                "insert" | "write" | "put" | "store" => INSERT,
                "update" | "overwrite" => UPDATE,
                "delete" | "del" => DELETE,
                other => bail!("mix entry {part:?}: unknown operation {other:?} (read, insert/write, update, delete)"),
            };
            weights[op] += w
                .trim()
                .parse::<u64>()
                .with_context(|| format!("mix entry {part:?}: weight is not a number"))?;
        }
        ensure!(
            weights.iter().sum::<u64>() > 0,
            "mix {s:?} has no operation with a positive weight"
        );
        Ok(Mix {
            text: Mix::describe(&weights),
            weights,
        })
    }

    pub(super) fn describe(weights: &[u64; 4]) -> String {
        (0..4)
            .filter(|&i| weights[i] > 0)
            .map(|i| format!("{}={}", OP_NAMES[i], weights[i]))
            .collect::<Vec<_>>()
            .join(",")
    }

    pub(super) fn pick(&self, rng: &mut ChaCha8Rng) -> usize {
        let mut x = rng.gen_range(0..self.weights.iter().sum::<u64>());
        for (i, &w) in self.weights.iter().enumerate() {
            if x < w {
                return i;
            }
            x -= w;
        }
        READ
    }
}
