//! Reliability mechanisms and the policy that picks one per object (KVMD §3: standalone, hybrid,
//! custom). Pure: the manager asks, these answer.

use crate::error::{RedundancyError, Result};
use crate::relocate::Move;
use railstore_ec::{Code, CodeId, Codec, EcError, Engine, Offload};
use railstore_placement::{Layout, LayoutSpec, PieceOrder};
use serde::Deserialize;
use std::fmt;
use std::time::Duration;

/// How one object is protected (KVMD §3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mechanism {
    /// One copy on the key's primary device; no protection (RAID 0).
    Hash,
    /// r identical copies on r devices of the key's group.
    Replicate {
        /// Copies.
        r: u8,
    },
    /// Each segment cut into k data shards plus m parity shards on k + m devices.
    Split {
        /// The erasure code.
        code: CodeId,
        /// Data shards.
        k: u8,
        /// Parity shards.
        m: u8,
    },
    /// Whole objects from up to k devices coded together into m parity pieces.
    Pack {
        /// The erasure code.
        code: CodeId,
        /// Objects per set.
        k: u8,
        /// Parity pieces per set.
        m: u8,
    },
}

impl Mechanism {
    /// Devices one segment occupies (the placement width it needs).
    pub fn width(&self) -> usize {
        match *self {
            Mechanism::Hash => 1,
            Mechanism::Replicate { r } => r as usize,
            Mechanism::Split { k, m, .. } | Mechanism::Pack { k, m, .. } => (k + m) as usize,
        }
    }

    /// Pieces that may be lost without losing the object.
    pub fn tolerance(&self) -> usize {
        match *self {
            Mechanism::Hash => 0,
            Mechanism::Replicate { r } => r as usize - 1,
            Mechanism::Split { m, .. } | Mechanism::Pack { m, .. } => m as usize,
        }
    }

    /// Parses `hash`, `rep3`, `split4+2`, `pack4+2` (Cauchy RS), with an optional `:vandermonde`.
    pub fn parse(s: &str) -> Result<Mechanism> {
        let bad = || {
            RedundancyError::Config(format!(
                "unknown mechanism {s:?}: expected hash, repR, splitK+M or packK+M \
                 (optionally :cauchy or :vandermonde)"
            ))
        };
        let (name, code) = match s.split_once(':') {
            Some((n, "cauchy")) => (n, CodeId::CauchyRs),
            Some((n, "vandermonde")) => (n, CodeId::VandermondeRs),
            Some(_) => return Err(bad()),
            None => (s, CodeId::CauchyRs),
        };
        let km = |rest: &str| -> Result<(u8, u8)> {
            let (k, m) = rest.split_once('+').ok_or_else(bad)?;
            Ok((k.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?))
        };
        let mech = if name == "hash" {
            Mechanism::Hash
        } else if let Some(r) = name.strip_prefix("rep") {
            Mechanism::Replicate {
                r: r.parse().map_err(|_| bad())?,
            }
        } else if let Some(rest) = name.strip_prefix("split") {
            let (k, m) = km(rest)?;
            Mechanism::Split { code, k, m }
        } else if let Some(rest) = name.strip_prefix("pack") {
            let (k, m) = km(rest)?;
            Mechanism::Pack { code, k, m }
        } else {
            return Err(bad());
        };
        mech.validate()?;
        Ok(mech)
    }

    /// Rejects parameters that cannot work.
    pub fn validate(&self) -> Result<()> {
        match *self {
            Mechanism::Hash => Ok(()),
            Mechanism::Replicate { r } if (1..=16).contains(&r) => Ok(()),
            Mechanism::Split { k, m, .. } | Mechanism::Pack { k, m, .. }
                if k >= 1 && m >= 1 && (k as usize + m as usize) <= 64 =>
            {
                Ok(())
            }
            _ => Err(RedundancyError::Config(format!(
                "{self}: need 1 <= r <= 16, or k >= 1, m >= 1 and k + m <= 64"
            ))),
        }
    }

    /// The mechanism's id byte in piece headers (KVMD Table 2's RM ID).
    pub fn code_byte(&self) -> u8 {
        match *self {
            Mechanism::Split { code, .. } | Mechanism::Pack { code, .. } => code.as_u8(),
            _ => 0,
        }
    }
}

impl fmt::Display for Mechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let suffix = |code: &CodeId| match code {
            CodeId::CauchyRs => "",
            CodeId::VandermondeRs => ":vandermonde",
        };
        match self {
            Mechanism::Hash => write!(f, "hash"),
            Mechanism::Replicate { r } => write!(f, "rep{r}"),
            Mechanism::Split { code, k, m } => write!(f, "split{k}+{m}{}", suffix(code)),
            Mechanism::Pack { code, k, m } => write!(f, "pack{k}+{m}{}", suffix(code)),
        }
    }
}

/// Which mechanism protects a new object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Policy {
    /// One mechanism for everything.
    Standalone(Mechanism),
    /// By value size: the first rule whose `max_bytes` is at least the object's length, else
    /// `rest`.
    Hybrid {
        /// (largest object length, mechanism), ascending.
        rules: Vec<(u64, Mechanism)>,
        /// Mechanism for objects above every rule.
        rest: Mechanism,
    },
}

impl Policy {
    /// The mechanism for an object of `len` bytes (custom mode passes its own and skips this).
    pub fn choose(&self, len: u64) -> Mechanism {
        match self {
            Policy::Standalone(m) => *m,
            Policy::Hybrid { rules, rest } => rules
                .iter()
                .find(|(max, _)| len <= *max)
                .map(|(_, m)| *m)
                .unwrap_or(*rest),
        }
    }

    /// Every mechanism the policy can pick.
    pub fn mechanisms(&self) -> Vec<Mechanism> {
        match self {
            Policy::Standalone(m) => vec![*m],
            Policy::Hybrid { rules, rest } => {
                rules.iter().map(|(_, m)| *m).chain([*rest]).collect()
            }
        }
    }
}

/// The reliability manager's configuration, as read from its TOML file.
#[derive(Debug, Clone, PartialEq)]
pub struct ManagerConfig {
    /// Mechanism choice.
    pub policy: Policy,
    /// How long a packing queue waits for k objects before packing fewer.
    pub pack_wait: Duration,
    /// Largest object accepted.
    pub object_bytes_max: u64,
    /// Entries in the metadata cache (0 disables it).
    pub meta_cache_entries_max: usize,
    /// Bytes of unit tables (the checksums of large pieces' units, `part.rs`) kept so that a
    /// read below a segment reads only the units it needs; 0 reads each table with its units.
    pub unit_table_cache_bytes: usize,
    /// Devices per redundancy group; `None` takes the widest mechanism of the policy. Set it
    /// wider to allow wider custom mechanisms per store.
    pub layout_width: Option<usize>,
    /// Rounds of redundancy groups per device when N > width (see `placement`).
    pub layout_rounds: usize,
    /// Seed of the placement layout.
    pub layout_seed: u64,
    /// Where the pieces of objects narrower than the group go: spread over the ring (every
    /// layout made now), or consecutive (a data folder whose layout was made before spreading;
    /// the store keeps what the folder's layout file says). Not a TOML setting.
    pub piece_order: PieceOrder,
    /// Devices each later epoch of the layout added (the data folder's layout file; empty for
    /// an array never grown). Not a TOML setting.
    pub grows: Vec<usize>,
    /// Objects are moving between the layout's last two epochs (`move.rs`). Not a TOML
    /// setting.
    pub moving: Option<Move>,
    /// A fast read that waits this long for a device reads one more preferred device (another
    /// copy, or a parity shard to decode with) and takes the first answers; `None` waits.
    /// Under read/write separation the window then needs more readers than k (Rails §4.3).
    pub slow_read_bypass: Option<Duration>,
    /// How device faults are handled: operation timeout, read errors tolerated.
    pub faults: crate::io::FaultPolicy,
    /// The erasure-coding engines of split and packed objects.
    pub ec: EcEngines,
}

/// Shard length from which `ec_offload` takes a call when the configuration gives none: the
/// host-to-host GPU path reaches 80 % of the bus from 256 KiB chunks (docs/benchmarks/ec-gpu.md).
pub const OFFLOAD_MIN_SHARD_BYTES_DEFAULT: usize = 256 << 10;

/// Which engines code: `[redundancy] ec_engine`, `ec_offload`, `ec_offload_min_shard_bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EcEngines {
    /// The CPU engine; `None`: [`Engine::auto`] (`RAILSTORE_EC_ENGINE`, else the fastest here).
    pub engine: Option<Engine>,
    /// Shards at least this long go to an offload engine (the GPU): large objects.
    pub offload: Option<Offload>,
}

impl EcEngines {
    /// A codec of `code` on these engines; an error if one cannot run here.
    pub fn codec(&self, code: Code) -> std::result::Result<Codec, EcError> {
        let engine = match self.engine {
            Some(e) => e,
            None => Engine::auto()?,
        };
        let codec = Codec::with_engine(code, engine)?;
        match self.offload {
            Some(o) => codec.with_offload(o.engine, o.min_shard_bytes),
            None => Ok(codec),
        }
    }

    /// Checks that the engines can run here, so a store does not start to fail on its first
    /// large object.
    pub fn check(&self) -> Result<()> {
        let code = Code::new(CodeId::CauchyRs, 1, 1).expect("RS(1,1) is a code");
        self.codec(code)
            .map(|_| ())
            .map_err(|e| RedundancyError::Config(format!("ec engines: {e}")))
    }

    fn parse(engine: Option<&str>, offload: Option<&str>, min: Option<usize>) -> Result<Self> {
        // "auto" is matched below, so `from_name` never probes the machine here.
        let name = |key: &str, n: &str| {
            Engine::from_name(n).map_err(|e| RedundancyError::Config(format!("{key}: {e}")))
        };
        let engine = match engine {
            None | Some("auto") => None,
            Some(n) => Some(name("ec_engine", n)?),
        };
        let offload = match (offload, min) {
            (None, None) => None,
            (None, Some(_)) => {
                return Err(RedundancyError::Config(
                    "ec_offload_min_shard_bytes needs ec_offload (the engine to offload to)".into(),
                ))
            }
            (Some(n), min) => {
                let e = name("ec_offload", n)?;
                if !e.is_offload() {
                    return Err(RedundancyError::Config(format!(
                        "ec_offload: {}",
                        EcError::NotOffload(e.name())
                    )));
                }
                Some(Offload {
                    engine: e,
                    min_shard_bytes: min.unwrap_or(OFFLOAD_MIN_SHARD_BYTES_DEFAULT),
                })
            }
        };
        Ok(EcEngines { engine, offload })
    }
}

impl Default for ManagerConfig {
    fn default() -> Self {
        ManagerConfig {
            policy: Policy::Standalone(Mechanism::Replicate { r: 3 }),
            pack_wait: Duration::from_millis(2),
            object_bytes_max: 1 << 30,
            meta_cache_entries_max: 1 << 20,
            unit_table_cache_bytes: 16 << 20,
            layout_width: None,
            layout_rounds: 4,
            layout_seed: 0x5241_494c,
            piece_order: PieceOrder::Spread,
            grows: Vec::new(),
            moving: None,
            slow_read_bypass: None,
            faults: crate::io::FaultPolicy::default(),
            ec: EcEngines::default(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    mode: String,
    mechanism: Option<String>,
    #[serde(default)]
    hybrid: Vec<HybridRule>,
    pack_wait_ms: Option<f64>,
    object_bytes_max: Option<u64>,
    meta_cache_entries_max: Option<usize>,
    unit_table_cache_bytes: Option<usize>,
    layout_width: Option<usize>,
    layout_rounds: Option<usize>,
    layout_seed: Option<u64>,
    slow_read_bypass_ms: Option<f64>,
    device_op_timeout_ms: Option<u64>,
    read_errors_max: Option<u64>,
    ec_engine: Option<String>,
    ec_offload: Option<String>,
    ec_offload_min_shard_bytes: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HybridRule {
    max_bytes: Option<u64>,
    mechanism: String,
}

impl ManagerConfig {
    /// The width a placement layout needs for every mechanism of the policy.
    pub fn width(&self) -> usize {
        let widest = self
            .policy
            .mechanisms()
            .iter()
            .map(Mechanism::width)
            .max()
            .unwrap_or(1);
        self.layout_width.unwrap_or(widest)
    }

    /// The placement layout of `devices` devices under this configuration: what
    /// [`crate::Manager::open`] uses, so callers (read/write separation) can learn the colours
    /// before opening it.
    ///
    /// `devices` counts every epoch's: the first epoch has what the later ones ([`grows`])
    /// did not add.
    ///
    /// [`grows`]: ManagerConfig::grows
    pub fn layout(&self, devices: usize) -> Result<Layout> {
        let width = self.width();
        let added: usize = self.grows.iter().sum();
        let first = devices.checked_sub(added).ok_or_else(|| {
            RedundancyError::Config(format!(
                "{devices} devices, fewer than the {added} the layout's later epochs added"
            ))
        })?;
        let rounds = if first == width {
            1
        } else {
            self.layout_rounds.max(1)
        };
        let mut layout = Layout::with_order(
            LayoutSpec {
                devices: first,
                width,
                rounds,
                seed: self.layout_seed,
                version: 1,
            },
            self.piece_order,
        )
        .map_err(|e| RedundancyError::Config(e.to_string()))?;
        for &g in &self.grows {
            layout = layout
                .grown(g)
                .map_err(|e| RedundancyError::Config(e.to_string()))?;
        }
        Ok(layout)
    }

    /// Parses the TOML configuration (see `docs/redundancy.md`):
    ///
    /// ```toml
    /// mode = "hybrid"            # or "standalone" with mechanism = "split4+2"
    /// pack_wait_ms = 2
    /// [[hybrid]]
    /// max_bytes = 4096
    /// mechanism = "rep3"
    /// [[hybrid]]
    /// mechanism = "split4+2"     # no max_bytes: everything larger
    /// ```
    pub fn from_toml(text: &str) -> Result<ManagerConfig> {
        let f: ConfigFile =
            toml::from_str(text).map_err(|e| RedundancyError::Config(e.to_string()))?;
        let policy = match f.mode.as_str() {
            "standalone" => {
                let m = f.mechanism.as_deref().ok_or_else(|| {
                    RedundancyError::Config("standalone mode needs `mechanism`".into())
                })?;
                if !f.hybrid.is_empty() {
                    return Err(RedundancyError::Config(
                        "standalone mode takes no [[hybrid]] rules".into(),
                    ));
                }
                Policy::Standalone(Mechanism::parse(m)?)
            }
            "hybrid" => {
                let mut rules = Vec::new();
                let mut rest = None;
                for (i, r) in f.hybrid.iter().enumerate() {
                    let mech = Mechanism::parse(&r.mechanism)?;
                    match r.max_bytes {
                        Some(max) => {
                            if rest.is_some() {
                                return Err(RedundancyError::Config(format!(
                                    "hybrid rule {i}: only the last rule may omit max_bytes"
                                )));
                            }
                            if rules.last().is_some_and(|(prev, _)| *prev >= max) {
                                return Err(RedundancyError::Config(format!(
                                    "hybrid rule {i}: max_bytes must increase"
                                )));
                            }
                            rules.push((max, mech));
                        }
                        None => rest = Some(mech),
                    }
                }
                let rest = rest.ok_or_else(|| {
                    RedundancyError::Config(
                        "hybrid mode needs a last [[hybrid]] rule without max_bytes".into(),
                    )
                })?;
                if f.mechanism.is_some() {
                    return Err(RedundancyError::Config(
                        "hybrid mode takes [[hybrid]] rules, not `mechanism`".into(),
                    ));
                }
                Policy::Hybrid { rules, rest }
            }
            other => {
                return Err(RedundancyError::Config(format!(
                    "mode {other:?}: expected \"standalone\" or \"hybrid\" (custom mode is a \
                     per-store mechanism on top of either)"
                )))
            }
        };
        let d = ManagerConfig::default();
        let pack_wait = match f.pack_wait_ms {
            Some(ms) if ms.is_finite() && ms >= 0.0 => Duration::from_secs_f64(ms / 1000.0),
            Some(ms) => {
                return Err(RedundancyError::Config(format!(
                    "pack_wait_ms {ms} must be >= 0"
                )))
            }
            None => d.pack_wait,
        };
        let slow_read_bypass = match f.slow_read_bypass_ms {
            Some(ms) if ms.is_finite() && ms > 0.0 => Some(Duration::from_secs_f64(ms / 1000.0)),
            Some(ms) => {
                return Err(RedundancyError::Config(format!(
                    "slow_read_bypass_ms {ms} must be > 0 (leave it out to wait)"
                )))
            }
            None => d.slow_read_bypass,
        };
        let ec = EcEngines::parse(
            f.ec_engine.as_deref(),
            f.ec_offload.as_deref(),
            f.ec_offload_min_shard_bytes,
        )?;
        Ok(ManagerConfig {
            ec,
            policy,
            pack_wait,
            slow_read_bypass,
            object_bytes_max: f.object_bytes_max.unwrap_or(d.object_bytes_max),
            meta_cache_entries_max: f.meta_cache_entries_max.unwrap_or(d.meta_cache_entries_max),
            unit_table_cache_bytes: f.unit_table_cache_bytes.unwrap_or(d.unit_table_cache_bytes),
            layout_width: f.layout_width,
            layout_rounds: f.layout_rounds.unwrap_or(d.layout_rounds),
            layout_seed: f.layout_seed.unwrap_or(d.layout_seed),
            piece_order: d.piece_order,
            grows: d.grows,
            moving: d.moving,
            faults: crate::io::FaultPolicy {
                op_timeout: match f.device_op_timeout_ms {
                    Some(0) => {
                        return Err(RedundancyError::Config(
                            "device_op_timeout_ms must be > 0 (leave it out for the default)"
                                .into(),
                        ))
                    }
                    Some(ms) => Some(Duration::from_millis(ms)),
                    None => d.faults.op_timeout,
                },
                read_errors_max: f.read_errors_max.unwrap_or(d.faults.read_errors_max),
                ..d.faults
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for s in [
            "hash",
            "rep3",
            "rep1",
            "split4+2",
            "pack4+2",
            "split10+4:vandermonde",
        ] {
            assert_eq!(Mechanism::parse(s).unwrap().to_string(), s);
        }
        for bad in [
            "",
            "rep",
            "rep0",
            "split4",
            "split0+2",
            "pack4+0",
            "raid5",
            "split4+2:x",
        ] {
            assert!(Mechanism::parse(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn ec_engine_settings_parse_and_refuse_what_cannot_run() {
        let parse = |extra: &str| {
            ManagerConfig::from_toml(&format!(
                "mode = \"standalone\"\nmechanism = \"split4+2\"\n{extra}"
            ))
        };
        assert_eq!(parse("").unwrap().ec, EcEngines::default());
        assert_eq!(parse("ec_engine = \"auto\"").unwrap().ec.engine, None);
        let c = parse("ec_engine = \"scalar\"").unwrap();
        assert_eq!(c.ec.engine, Some(Engine::Scalar));
        // The codec follows the setting.
        let code = Code::new(CodeId::CauchyRs, 4, 2).unwrap();
        assert_eq!(c.ec.codec(code.clone()).unwrap().engine(), Engine::Scalar);
        let e = parse("ec_engine = \"warp\"").unwrap_err().to_string();
        assert!(e.contains("ec_engine") && e.contains("warp"), "{e}");
        let e = parse("ec_offload = \"scalar\"").unwrap_err().to_string();
        assert!(e.contains("codes on the CPU"), "{e}");
        let e = parse("ec_offload_min_shard_bytes = 4096")
            .unwrap_err()
            .to_string();
        assert!(e.contains("needs ec_offload"), "{e}");
        let c = parse("ec_offload = \"cuda\"").unwrap();
        assert_eq!(
            c.ec.offload,
            Some(Offload {
                engine: Engine::Cuda,
                min_shard_bytes: OFFLOAD_MIN_SHARD_BYTES_DEFAULT
            })
        );
        let c = parse("ec_offload = \"cuda\"\nec_offload_min_shard_bytes = 65536").unwrap();
        assert_eq!(c.ec.offload.unwrap().min_shard_bytes, 65536);
        // Whether the GPU is there decides whether the setting can start a store.
        match railstore_ec::gpu_unavailable_reason() {
            Some(why) => {
                let e = c.ec.check().unwrap_err().to_string();
                assert!(
                    e.contains("cuda is not available") && e.contains(&why),
                    "{e}"
                );
            }
            None => {
                c.ec.check().unwrap();
                let codec = c.ec.codec(code).unwrap();
                assert_eq!(codec.engine_for(65535), codec.engine());
                assert_eq!(codec.engine_for(65536), Engine::Cuda);
            }
        }
    }

    #[test]
    fn hybrid_config_picks_by_size() {
        let c = ManagerConfig::from_toml(
            r#"
            mode = "hybrid"
            pack_wait_ms = 5
            slow_read_bypass_ms = 2.5
            [[hybrid]]
            max_bytes = 4096
            mechanism = "rep3"
            [[hybrid]]
            max_bytes = 65536
            mechanism = "pack4+2"
            [[hybrid]]
            mechanism = "split4+2"
            "#,
        )
        .unwrap();
        assert_eq!(c.policy.choose(0), Mechanism::parse("rep3").unwrap());
        assert_eq!(c.policy.choose(4096), Mechanism::parse("rep3").unwrap());
        assert_eq!(c.policy.choose(4097), Mechanism::parse("pack4+2").unwrap());
        assert_eq!(
            c.policy.choose(1 << 20),
            Mechanism::parse("split4+2").unwrap()
        );
        assert_eq!(c.pack_wait, Duration::from_millis(5));
        assert_eq!(c.slow_read_bypass, Some(Duration::from_micros(2500)));
        assert_eq!(c.width(), 6);
    }

    #[test]
    fn bad_configs_say_why() {
        for (text, needle) in [
            ("mode = \"raid\"", "expected"),
            ("mode = \"standalone\"", "needs `mechanism`"),
            ("mode = \"hybrid\"", "without max_bytes"),
            (
                "mode = \"hybrid\"\n[[hybrid]]\nmax_bytes = 9\nmechanism = \"rep3\"\n[[hybrid]]\nmax_bytes = 5\nmechanism = \"rep2\"\n[[hybrid]]\nmechanism = \"hash\"",
                "must increase",
            ),
            ("mode = \"standalone\"\nmechanism = \"split0+1\"", "k >= 1"),
            ("mode = \"standalone\"\nmechanism = \"hash\"\ncolour = 3", "unknown field"),
            (
                "mode = \"standalone\"\nmechanism = \"rep3\"\nslow_read_bypass_ms = 0",
                "must be > 0",
            ),
        ] {
            let e = ManagerConfig::from_toml(text).unwrap_err().to_string();
            assert!(e.contains(needle), "{text}: {e}");
        }
    }
}
