//! Mean time to data loss of the KVMD reliability mechanisms (KVMD §5.1, eq. 1–2) and the
//! read/write cost comparison of KVMD Table 4 (§5.2), with numbers. Pure arithmetic, no I/O.
//!
//! # The model
//!
//! A *reliability set* is the group of objects that protect each other: the `r` replicas of an
//! object (replication), the `k + m` chunks of one object (splitting), or `k` whole objects and
//! their `m` parity objects (packing). Each member of a set lives on a different device. A set is
//! the birth–death Markov chain of KVMD Figure 13: state `i` = objects of the set lost so far;
//! from state `i` the next loss comes at rate `(N - i)·λ` (`N` objects per set, `λ = 1/MTTF`),
//! a repair at rate `μ` takes the set from `i` back to `i - 1` (serial repair), and state `f`
//! (the first loss the set cannot survive) absorbs. `MTTDL_set` is the mean time from state 0 to
//! state `f`; the system's MTTDL is `MTTDL_set / N_RS` (eq. 1), `N_RS` being the number of sets
//! stored.
//!
//! Eq. 2 approximates `MTTDL_set ≈ μ^(f-1) / ((N)_(f-1) · λ^f)` where the paper defines
//! `(a)_(b) = a·(a-1)···(a-b)` — `b + 1` factors, *not* the usual falling factorial with `b`
//! factors. That reading is the one the chain confirms: its exact solution tends to
//! `μ^(f-1) / (N·(N-1)···(N-f+1) · λ^f)`, the product of the `f` loss rates out of states
//! `0..f`, and `(N)_(f-1)` with the paper's definition is exactly `N·(N-1)···(N-f+1)`
//! ([`paper_falling_factorial`], tested against [`mttdl_set_exact`]).
//!
//! Everything is computed with natural logarithms ([`Hours`]), so values far past `f64::MAX`
//! (an 8-parity set with a fast repair) still print.

use std::fmt;
use std::str::FromStr;

/// Hours in a (Julian) year, 365.25 days.
pub const HOURS_PER_YEAR: f64 = 8766.0;

/// Errors from the MTTDL model.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MttdlError {
    /// A parameter is out of its domain (negative, zero, NaN, ...).
    #[error("invalid parameter: {0}")]
    InvalidParameter(String),
    /// A mechanism label that does not parse.
    #[error(
        "unknown mechanism {0:?} (use hash, rep<r>, split<k>+<m>, pack<k>+<m>, raid1x<r>, \
         raid5x<n>, raid6x<n>; e.g. rep3, split4+2, pack4+2, raid6x6)"
    )]
    UnknownMechanism(String),
    /// A set needs more distinct devices than the array has.
    #[error("{scheme} puts each set on {width} devices but the array has only {devices}")]
    SetTooWide {
        /// The mechanism's label.
        scheme: String,
        /// Objects (devices) per set.
        width: u32,
        /// Devices in the array.
        devices: u32,
    },
}

/// A duration in hours kept as its natural logarithm, so that an MTTDL of `1e400` hours is
/// representable. Ordering is the ordering of the durations.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct Hours {
    ln: f64,
}

impl Hours {
    /// From a plain number of hours (`> 0`).
    pub fn from_hours(h: f64) -> Self {
        Hours { ln: h.ln() }
    }

    /// From the natural logarithm of the number of hours.
    pub fn from_ln(ln: f64) -> Self {
        Hours { ln }
    }

    /// Natural logarithm of the number of hours.
    pub fn ln(self) -> f64 {
        self.ln
    }

    /// Hours as an `f64`; `inf` past `f64::MAX`.
    pub fn hours(self) -> f64 {
        self.ln.exp()
    }

    /// Years (of [`HOURS_PER_YEAR`]) as an `f64`; `inf` past `f64::MAX`.
    pub fn years(self) -> f64 {
        (self.ln - HOURS_PER_YEAR.ln()).exp()
    }

    /// `log10` of the hours.
    pub fn log10_hours(self) -> f64 {
        self.ln / std::f64::consts::LN_10
    }

    /// `log10` of the years.
    pub fn log10_years(self) -> f64 {
        (self.ln - HOURS_PER_YEAR.ln()) / std::f64::consts::LN_10
    }

    /// This duration divided by `d` (`> 0`).
    pub fn divided_by(self, d: f64) -> Self {
        Hours {
            ln: self.ln - d.ln(),
        }
    }
}

/// Formats `10^log10` with three significant digits: plain for `0.01 <= x < 100000`
/// (`"9.51"`, `"83333"`), otherwise scientific (`"4.02e31"`, `"1.50e-7"`); never overflows.
pub fn format_log10(log10: f64) -> String {
    if log10.is_nan() {
        return "NaN".into();
    }
    if log10 == f64::INFINITY {
        return "inf".into();
    }
    if log10 == f64::NEG_INFINITY {
        return "0".into();
    }
    if (-2.0..5.0).contains(&log10) {
        let x = 10f64.powf(log10);
        let decimals = (2 - log10.floor() as i32).max(0) as usize;
        return format!("{x:.decimals$}");
    }
    let mut e = log10.floor();
    let mut mant = 10f64.powf(log10 - e);
    if (mant * 100.0).round() >= 1000.0 {
        mant /= 10.0;
        e += 1.0;
    }
    format!("{mant:.2}e{}", e as i64)
}

impl fmt::Display for Hours {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_log10(self.log10_hours()))
    }
}

/// `ln(e^a + e^b)` without overflow.
fn ln_add(a: f64, b: f64) -> f64 {
    let (hi, lo) = if a >= b { (a, b) } else { (b, a) };
    if lo == f64::NEG_INFINITY {
        return hi;
    }
    hi + (lo - hi).exp().ln_1p()
}

/// The paper's `(a)_(b) = a·(a-1)···(a-b)` (eq. 2): `b + 1` factors. `0` when a factor is `0`
/// or negative would be reached (`b >= a`).
pub fn paper_falling_factorial(a: u32, b: u32) -> f64 {
    if b >= a {
        return 0.0;
    }
    (0..=b).map(|j| f64::from(a - j)).product()
}

fn ln_paper_falling_factorial(a: u32, b: u32) -> f64 {
    if b >= a {
        return f64::NEG_INFINITY;
    }
    (0..=b).map(|j| f64::from(a - j).ln()).sum()
}

fn check_chain(n: u32, f: u32, lambda: f64, mu: f64) -> Result<(), MttdlError> {
    if f == 0 || f > n {
        return Err(MttdlError::InvalidParameter(format!(
            "need 1 <= f <= N, got f = {f}, N = {n}"
        )));
    }
    if !(lambda > 0.0 && lambda.is_finite()) {
        return Err(MttdlError::InvalidParameter(format!(
            "failure rate lambda must be > 0, got {lambda}"
        )));
    }
    if !(mu >= 0.0 && mu.is_finite()) {
        return Err(MttdlError::InvalidParameter(format!(
            "repair rate mu must be >= 0, got {mu}"
        )));
    }
    Ok(())
}

/// KVMD eq. 2: `MTTDL_set ≈ μ^(f-1) / ((N)_(f-1) · λ^f)`, the leading term of the exact
/// chain for `μ ≫ λ`. `n` = objects per set, `f` = losses that lose data, rates per hour.
pub fn mttdl_set_approx(n: u32, f: u32, lambda: f64, mu: f64) -> Result<Hours, MttdlError> {
    check_chain(n, f, lambda, mu)?;
    let ln_mu_term = if f == 1 {
        0.0
    } else {
        f64::from(f - 1) * mu.ln()
    };
    Ok(Hours::from_ln(
        ln_mu_term - ln_paper_falling_factorial(n, f - 1) - f64::from(f) * lambda.ln(),
    ))
}

/// The exact mean time to absorption of the Figure 13 chain, from state 0 to state `f`.
///
/// Let `T_i` be the mean time from first entering state `i` to first entering `i + 1`. Out of
/// state `i` the chain moves forward at `λ_i = (N - i)·λ` and (for `i >= 1`) back at `μ`, and a
/// step back costs `T_{i-1}` more before the chain is in `i` again, so
/// `T_i = 1/(λ_i + μ) + μ/(λ_i + μ)·(T_{i-1} + T_i)`, i.e. `λ_i·T_i = 1 + μ·T_{i-1}` with
/// `T_0 = 1/λ_0`, and `MTTDL_set = Σ_{i<f} T_i`. This is forward substitution on the
/// tridiagonal system `(-Q_T)·t = 1` of the transient states; every term is positive, so it has
/// no cancellation and runs in log space.
pub fn mttdl_set_exact(n: u32, f: u32, lambda: f64, mu: f64) -> Result<Hours, MttdlError> {
    check_chain(n, f, lambda, mu)?;
    let ln_mu = mu.ln();
    let mut ln_total = f64::NEG_INFINITY;
    let mut ln_t = f64::NEG_INFINITY; // ln T_{i-1}; T_{-1} = 0
    for i in 0..f {
        let ln_lambda_i = f64::from(n - i).ln() + lambda.ln();
        ln_t = ln_add(0.0, ln_mu + ln_t) - ln_lambda_i;
        ln_total = ln_add(ln_total, ln_t);
    }
    Ok(Hours::from_ln(ln_total))
}

/// A reliability mechanism with its parameters, as the MTTDL model sees it. Local to this
/// module: labels are `hash`, `rep3`, `split4+2`, `pack4+2`, `raid1x3`, `raid5x5`, `raid6x6`
/// (and `raid<k>+<m>` for block RAID groups with other parity counts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MttdlScheme {
    /// One copy on the device the key hashes to; no redundancy.
    Hashing,
    /// `r` copies on `r` devices.
    Replication {
        /// Copies, `>= 1`.
        r: u32,
    },
    /// One object cut into `k` chunks plus `m` parity chunks on `k + m` devices.
    Splitting {
        /// Data chunks.
        k: u32,
        /// Parity chunks.
        m: u32,
    },
    /// `k` whole objects plus `m` parity objects (values virtually zero-padded) on `k + m`
    /// devices, with a metadata object per user key replicated `m` times.
    Packing {
        /// Objects per group.
        k: u32,
        /// Parity objects.
        m: u32,
    },
    /// Block RAID 1: `r`-way mirroring of whole devices; a failed device is rebuilt in full.
    RaidMirror {
        /// Copies.
        r: u32,
    },
    /// Block RAID 5/6: groups of `k + m` devices with `m` parity (RAID 6: `m = 2`); a failed
    /// device is rebuilt in full.
    RaidParity {
        /// Data devices per group.
        k: u32,
        /// Parity devices per group.
        m: u32,
    },
}

impl MttdlScheme {
    /// Objects per reliability set, `N` in eq. 2 (devices per group for RAID).
    pub fn set_width(&self) -> u32 {
        match *self {
            MttdlScheme::Hashing => 1,
            MttdlScheme::Replication { r } | MttdlScheme::RaidMirror { r } => r,
            MttdlScheme::Splitting { k, m }
            | MttdlScheme::Packing { k, m }
            | MttdlScheme::RaidParity { k, m } => k + m,
        }
    }

    /// Losses in one set that lose data, `f`: `n` for replication, `m + 1` for erasure codes.
    pub fn f(&self) -> u32 {
        match *self {
            MttdlScheme::Hashing => 1,
            MttdlScheme::Replication { r } | MttdlScheme::RaidMirror { r } => r,
            MttdlScheme::Splitting { m, .. }
            | MttdlScheme::Packing { m, .. }
            | MttdlScheme::RaidParity { m, .. } => m + 1,
        }
    }

    /// Block RAID rather than a KVMD mechanism.
    pub fn is_raid(&self) -> bool {
        matches!(
            self,
            MttdlScheme::RaidMirror { .. } | MttdlScheme::RaidParity { .. }
        )
    }

    fn validate(&self) -> Result<(), MttdlError> {
        let bad = match *self {
            MttdlScheme::Hashing => false,
            MttdlScheme::Replication { r } | MttdlScheme::RaidMirror { r } => r == 0,
            MttdlScheme::Splitting { k, m }
            | MttdlScheme::Packing { k, m }
            | MttdlScheme::RaidParity { k, m } => k == 0 || k.checked_add(m).is_none(),
        };
        if bad {
            return Err(MttdlError::InvalidParameter(format!(
                "{self}: needs at least one copy / data object"
            )));
        }
        Ok(())
    }
}

impl fmt::Display for MttdlScheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            MttdlScheme::Hashing => write!(f, "hash"),
            MttdlScheme::Replication { r } => write!(f, "rep{r}"),
            MttdlScheme::Splitting { k, m } => write!(f, "split{k}+{m}"),
            MttdlScheme::Packing { k, m } => write!(f, "pack{k}+{m}"),
            MttdlScheme::RaidMirror { r } => write!(f, "raid1x{r}"),
            MttdlScheme::RaidParity { k, m: 1 } => write!(f, "raid5x{}", k + 1),
            MttdlScheme::RaidParity { k, m: 2 } => write!(f, "raid6x{}", k + 2),
            MttdlScheme::RaidParity { k, m } => write!(f, "raid{k}+{m}"),
        }
    }
}

impl FromStr for MttdlScheme {
    type Err = MttdlError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim().to_ascii_lowercase();
        let unknown = || MttdlError::UnknownMechanism(s.to_string());
        let num = |x: &str| x.parse::<u32>().map_err(|_| unknown());
        let km = |x: &str| -> Result<(u32, u32), MttdlError> {
            let (k, m) = x.split_once('+').ok_or_else(unknown)?;
            Ok((num(k)?, num(m)?))
        };
        let scheme = if t == "hash" || t == "hashing" {
            MttdlScheme::Hashing
        } else if let Some(x) = t.strip_prefix("raid1x") {
            MttdlScheme::RaidMirror { r: num(x)? }
        } else if let Some(x) = t.strip_prefix("raid5x") {
            let n = num(x)?;
            MttdlScheme::RaidParity {
                k: n.checked_sub(1).ok_or_else(unknown)?,
                m: 1,
            }
        } else if let Some(x) = t.strip_prefix("raid6x") {
            let n = num(x)?;
            MttdlScheme::RaidParity {
                k: n.checked_sub(2).ok_or_else(unknown)?,
                m: 2,
            }
        } else if let Some(x) = t.strip_prefix("raid").filter(|x| x.contains('+')) {
            let (k, m) = km(x)?;
            MttdlScheme::RaidParity { k, m }
        } else if let Some(x) = t.strip_prefix("rep") {
            MttdlScheme::Replication { r: num(x)? }
        } else if let Some(x) = t.strip_prefix("split") {
            let (k, m) = km(x)?;
            MttdlScheme::Splitting { k, m }
        } else if let Some(x) = t.strip_prefix("pack") {
            let (k, m) = km(x)?;
            MttdlScheme::Packing { k, m }
        } else {
            return Err(unknown());
        };
        scheme.validate()?;
        Ok(scheme)
    }
}

/// Where the per-object repair rate `μ` comes from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Repair {
    /// `μ` given directly: set members repaired per hour, `MTTR = 1/μ`. Every mechanism gets
    /// this same `μ`, as in the paper; for block RAID the member is a whole device, so this is
    /// one over its rebuild time.
    Rate {
        /// Objects per hour.
        per_hour: f64,
    },
    /// A measured rebuild throughput, bytes restored on the replacement device per second;
    /// `μ = throughput · 3600 / bytes restored per lost set member` (an object for
    /// replication, a chunk `O/k` for splitting, object plus metadata `O + M` for packing, a
    /// whole device for block RAID).
    Throughput {
        /// Bytes per second.
        bytes_per_sec: f64,
    },
}

/// Inputs of the model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MttdlParams {
    /// Device mean time to failure, hours (`λ = 1/MTTF`).
    pub mttf_hours: f64,
    /// Raw capacity of one device, bytes.
    pub device_capacity: f64,
    /// Devices in the array; every set spreads over distinct devices.
    pub devices: u32,
    /// Average user object (value) size `O`, bytes.
    pub object_size: f64,
    /// Average packing metadata object size `M`, bytes.
    pub metadata_size: f64,
    /// Fraction of the raw capacity holding valid data, `(0, 1]`. KVMD's reliability depends on
    /// the sets actually stored, not on the capacity (§5.1); block RAID ignores this.
    pub fill: f64,
    /// The repair rate.
    pub repair: Repair,
}

impl MttdlParams {
    /// Per-hour device failure rate `λ = 1/MTTF`.
    pub fn lambda(&self) -> f64 {
        1.0 / self.mttf_hours
    }

    /// `C` of §5.1, read as the capacity of all the underlying devices together that holds
    /// data: `devices · device_capacity · fill`. (With `C` per device, `N_RS = C/(nO)` would
    /// be wrong by a factor `devices/n`: three devices with 3-way replication hold `C/O` sets,
    /// not `C/(3O)`.)
    pub fn stored_raw_bytes(&self) -> f64 {
        f64::from(self.devices) * self.device_capacity * self.fill
    }

    fn validate(&self) -> Result<(), MttdlError> {
        let pos = |name: &str, v: f64| {
            if v > 0.0 && v.is_finite() {
                Ok(())
            } else {
                Err(MttdlError::InvalidParameter(format!(
                    "{name} must be a positive number, got {v}"
                )))
            }
        };
        pos("MTTF", self.mttf_hours)?;
        pos("device capacity", self.device_capacity)?;
        pos("object size", self.object_size)?;
        if !(self.metadata_size >= 0.0 && self.metadata_size.is_finite()) {
            return Err(MttdlError::InvalidParameter(format!(
                "metadata size must be >= 0, got {}",
                self.metadata_size
            )));
        }
        if !(self.fill > 0.0 && self.fill <= 1.0) {
            return Err(MttdlError::InvalidParameter(format!(
                "fill must be in (0, 1], got {}",
                self.fill
            )));
        }
        if self.devices == 0 {
            return Err(MttdlError::InvalidParameter("devices must be >= 1".into()));
        }
        if self.object_size > self.device_capacity {
            return Err(MttdlError::InvalidParameter(
                "object size is larger than a device".into(),
            ));
        }
        match self.repair {
            Repair::Rate { per_hour } => pos("repair rate", per_hour),
            Repair::Throughput { bytes_per_sec } => pos("repair throughput", bytes_per_sec),
        }
    }
}

/// A fraction `num/den` kept unreduced so it reads like the paper's formula (`4/14`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frac {
    /// Numerator.
    pub num: u64,
    /// Denominator.
    pub den: u64,
}

impl Frac {
    fn new(num: u32, den: u32) -> Self {
        Frac {
            num: u64::from(num),
            den: u64::from(den),
        }
    }

    /// The value.
    pub fn value(&self) -> f64 {
        self.num as f64 / self.den as f64
    }
}

impl fmt::Display for Frac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.num == self.den {
            write!(f, "1")
        } else {
            write!(f, "{}/{}", self.num, self.den)
        }
    }
}

/// A closed range `[lo, hi]` of fractions, as Table 4 writes them; a point when `lo == hi`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FracRange {
    /// Lower end.
    pub lo: Frac,
    /// Upper end.
    pub hi: Frac,
}

impl FracRange {
    fn point(f: Frac) -> Self {
        FracRange { lo: f, hi: f }
    }
}

impl fmt::Display for FracRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.lo == self.hi {
            write!(f, "{}", self.lo)
        } else {
            write!(f, "[{}, {}]", self.lo, self.hi)
        }
    }
}

/// What a device rebuild is proportional to (Table 4, "Rebuild Time").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RebuildScale {
    /// KVMD rebuilds only the user objects that were on the failed device.
    UserObjects,
    /// Block RAID rebuilds the whole device.
    DeviceCapacity,
    /// No redundancy: nothing to rebuild from.
    Impossible,
}

impl fmt::Display for RebuildScale {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RebuildScale::UserObjects => "user objects",
            RebuildScale::DeviceCapacity => "device capacity",
            RebuildScale::Impossible => "impossible",
        })
    }
}

/// One column of KVMD Table 4 (standalone mode), with numbers.
#[derive(Debug, Clone, PartialEq)]
pub struct Table4Costs {
    /// "Writes": user writes per device write request, i.e. the fraction of the devices'
    /// aggregate write request rate that reaches the user.
    pub writes: FracRange,
    /// "Reads": user reads per device read request.
    pub reads: FracRange,
    /// "Space Utilization": user bytes per raw byte, metadata ignored as in the paper.
    pub space: FracRange,
    /// Space utilization of a full set counting packing's `m·k` metadata objects of `M` bytes.
    pub space_with_metadata: f64,
    /// Bytes written to the devices per user byte inserted, `[best, worst]` (array-level write
    /// amplification; the SSDs' own amplification comes on top).
    pub write_amplification: (f64, f64),
    /// What a rebuild is proportional to.
    pub rebuild_scale: RebuildScale,
    /// Bytes restored to rebuild one failed device (`None`: cannot be rebuilt).
    pub rebuild_bytes: Option<f64>,
    /// Set members (objects, chunks; `1` device for RAID) restored to rebuild one device.
    pub rebuild_units: Option<f64>,
    /// Hours to rebuild one failed device with serial repair, `rebuild_units / μ`.
    pub rebuild_hours: Option<f64>,
    /// The paper's "Pros & Cons".
    pub pros_cons: &'static str,
}

/// The model's result for one mechanism.
#[derive(Debug, Clone, PartialEq)]
pub struct MttdlRow {
    /// The mechanism.
    pub scheme: MttdlScheme,
    /// Losses in a set that lose data.
    pub f: u32,
    /// Objects per set, `N` in eq. 2.
    pub set_width: u32,
    /// Bytes one set member takes on its device and costs to restore (`None` for hashing).
    pub repair_unit_bytes: Option<f64>,
    /// Repair rate `μ` per hour (`None` for hashing).
    pub mu_per_hour: Option<f64>,
    /// `N_RS` of eq. 1: sets stored (RAID: device groups; hashing: devices holding data).
    pub n_rs: f64,
    /// `MTTDL_set` by eq. 2.
    pub set_approx: Hours,
    /// `MTTDL_set` of the exact chain.
    pub set_exact: Hours,
    /// System MTTDL by eq. 1 with eq. 2.
    pub mttdl_approx: Hours,
    /// System MTTDL by eq. 1 with the exact chain.
    pub mttdl_exact: Hours,
    /// The Table 4 column.
    pub costs: Table4Costs,
}

/// Runs the model for each mechanism.
///
/// * Replication `rep<n>`: `f = n`, `N = n`, `N_RS = C/(nO)`.
/// * Splitting `split<k>+<m>`: `f = m + 1`, `N = k + m`, `N_RS = C/(n·O/k)`.
/// * Packing `pack<k>+<m>`: `f = m + 1`, `N = k + m`, `N_RS = C/(n·(O + M))`.
/// * Hashing: no redundancy, `MTTDL = MTTF / devices`: every object lives on one device and a
///   device failure loses all of them at once, so the system loses data at the first failure
///   of any of the devices that hold data, the minimum of `devices` exponential lifetimes.
///   (Eq. 1 with one-object sets would count every object as failing on its own and give the
///   absurd `MTTF·O/C`.)
/// * Block RAID `raid1x<r>`, `raid6x<n>`: the same chain over whole devices with
///   `μ = 1 / (device rebuild time)`, `N_RS = devices / n` groups.
///
/// `C` = [`MttdlParams::stored_raw_bytes`].
pub fn evaluate(
    params: &MttdlParams,
    schemes: &[MttdlScheme],
) -> Result<Vec<MttdlRow>, MttdlError> {
    params.validate()?;
    schemes.iter().map(|s| evaluate_one(params, s)).collect()
}

fn evaluate_one(p: &MttdlParams, scheme: &MttdlScheme) -> Result<MttdlRow, MttdlError> {
    scheme.validate()?;
    let width = scheme.set_width();
    if width > p.devices {
        return Err(MttdlError::SetTooWide {
            scheme: scheme.to_string(),
            width,
            devices: p.devices,
        });
    }
    let f = scheme.f();
    let lambda = p.lambda();
    let o = p.object_size;
    let meta = p.metadata_size;
    let n = f64::from(width);

    // Bytes one member of a set occupies on its device (and costs to restore).
    let unit = match *scheme {
        MttdlScheme::Hashing => None,
        MttdlScheme::Replication { .. } => Some(o),
        MttdlScheme::Splitting { k, .. } => Some(o / f64::from(k)),
        MttdlScheme::Packing { .. } => Some(o + meta),
        MttdlScheme::RaidMirror { .. } | MttdlScheme::RaidParity { .. } => Some(p.device_capacity),
    };
    let mu = unit.map(|u| match p.repair {
        Repair::Rate { per_hour } => per_hour,
        Repair::Throughput { bytes_per_sec } => bytes_per_sec * 3600.0 / u,
    });

    let (n_rs, set_approx, set_exact) = match (scheme, unit, mu) {
        (MttdlScheme::Hashing, _, _) => {
            let mttf = Hours::from_hours(p.mttf_hours);
            (f64::from(p.devices), mttf, mttf)
        }
        (_, Some(u), Some(mu)) => {
            let n_rs = if scheme.is_raid() {
                f64::from(p.devices) / n
            } else {
                p.stored_raw_bytes() / (n * u)
            };
            (
                n_rs,
                mttdl_set_approx(width, f, lambda, mu)?,
                mttdl_set_exact(width, f, lambda, mu)?,
            )
        }
        _ => unreachable!("every redundant scheme has a repair unit"),
    };

    let costs = table4(p, scheme, unit, mu);
    Ok(MttdlRow {
        scheme: *scheme,
        f,
        set_width: width,
        repair_unit_bytes: unit,
        mu_per_hour: mu,
        n_rs,
        set_approx,
        set_exact,
        mttdl_approx: set_approx.divided_by(n_rs),
        mttdl_exact: set_exact.divided_by(n_rs),
        costs,
    })
}

fn table4(
    p: &MttdlParams,
    scheme: &MttdlScheme,
    unit: Option<f64>,
    mu: Option<f64>,
) -> Table4Costs {
    let one = FracRange::point(Frac::new(1, 1));
    let o = p.object_size;
    let meta = p.metadata_size;
    let (writes, reads, space, space_meta, wa, pros_cons) = match *scheme {
        MttdlScheme::Hashing => (
            one,
            one,
            one,
            1.0,
            (1.0, 1.0),
            "No redundancy (RAID 0 analogue): full device throughput and capacity; the first \
             device failure loses data.",
        ),
        MttdlScheme::Replication { r } => {
            let fr = FracRange::point(Frac::new(1, r));
            let r = f64::from(r);
            (
                fr,
                one,
                fr,
                1.0 / r,
                (r, r),
                "Similar to RAID 1. Best for small, hot objects.",
            )
        }
        MttdlScheme::Splitting { k, m } => {
            let n = k + m;
            let ratio = f64::from(n) / f64::from(k);
            (
                FracRange::point(Frac::new(1, n)),
                FracRange {
                    lo: Frac::new(1, k),
                    hi: Frac::new(1, 1),
                },
                FracRange::point(Frac::new(k, n)),
                f64::from(k) / f64::from(n),
                (ratio, ratio),
                "Writes/reads proportional to value & request sizes. Best MTTDL. Best for \
                 large values.",
            )
        }
        MttdlScheme::Packing { k, m } => {
            // A group of ck user objects (1 <= ck <= k) costs ck data + m parity writes and
            // m metadata replicas per user key. Table 4 bounds: [1/(N+m), k/(N+mk)].
            let n = k + m;
            let (kf, mf) = (f64::from(k), f64::from(m));
            let full = (kf * o + mf * o + mf * kf * meta) / (kf * o);
            let single = (o + mf * o + mf * meta) / o;
            (
                FracRange {
                    lo: Frac::new(1, n + m),
                    hi: Frac::new(k, n + m * k),
                },
                one,
                FracRange {
                    lo: Frac::new(1, m + 1),
                    hi: Frac::new(k, n),
                },
                1.0 / full,
                (full, single),
                "Best reads. Best inserts. Very poor updates (a single update rewrites its \
                 group). Good, workload-dependent MTTDL.",
            )
        }
        MttdlScheme::RaidMirror { r } => {
            let fr = FracRange::point(Frac::new(1, r));
            let r = f64::from(r);
            (
                fr,
                one,
                fr,
                1.0 / r,
                (r, r),
                "Similar writes for all sizes. Best reads. Low MTTDL due to WA.",
            )
        }
        MttdlScheme::RaidParity { k, m } => {
            let n = k + m;
            (
                FracRange {
                    lo: Frac::new(1, n),
                    hi: Frac::new(k, n),
                },
                one,
                FracRange::point(Frac::new(k, n)),
                f64::from(k) / f64::from(n),
                (f64::from(n) / f64::from(k), f64::from(1 + m)),
                "Very poor writes (read-modify-write) and good reads. Poor, workload-dependent \
                 MTTDL due to WA.",
            )
        }
    };
    let (rebuild_scale, rebuild_bytes) = match *scheme {
        MttdlScheme::Hashing => (RebuildScale::Impossible, None),
        MttdlScheme::RaidMirror { .. } | MttdlScheme::RaidParity { .. } => {
            (RebuildScale::DeviceCapacity, Some(p.device_capacity))
        }
        _ => (RebuildScale::UserObjects, Some(p.device_capacity * p.fill)),
    };
    let rebuild_units = rebuild_bytes.zip(unit).map(|(b, u)| b / u);
    let rebuild_hours = rebuild_units.zip(mu).map(|(n, mu)| n / mu);
    Table4Costs {
        writes,
        reads,
        space,
        space_with_metadata: space_meta,
        write_amplification: wa,
        rebuild_scale,
        rebuild_bytes,
        rebuild_units,
        rebuild_hours,
        pros_cons,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rel(a: f64, b: f64) -> f64 {
        ((a - b) / b).abs()
    }

    /// Dense Gaussian elimination (partial pivoting) on `(-Q_T)·t = 1` for the transient
    /// states `0..f`: an independent numerical solution of the chain. The system's condition
    /// number grows like `(μ/λ)^(f-1)`, so it loses digits where the recursion does not; the
    /// comparison stays at moderate `μ/λ` with a 1e-6 tolerance.
    fn chain_by_linear_solve(n: u32, f: u32, lambda: f64, mu: f64) -> f64 {
        let s = f as usize;
        let mut a = vec![vec![0.0f64; s + 1]; s];
        for i in 0..s {
            let li = f64::from(n - i as u32) * lambda;
            let back = if i > 0 { mu } else { 0.0 };
            a[i][i] = li + back;
            if i + 1 < s {
                a[i][i + 1] = -li;
            }
            if i > 0 {
                a[i][i - 1] = -mu;
            }
            a[i][s] = 1.0;
        }
        for c in 0..s {
            let p = (c..s)
                .max_by(|&x, &y| a[x][c].abs().total_cmp(&a[y][c].abs()))
                .unwrap();
            a.swap(c, p);
            let pivot = a[c].clone();
            for (r, row) in a.iter_mut().enumerate() {
                if r != c {
                    let factor = row[c] / pivot[c];
                    for (x, &pv) in row.iter_mut().zip(&pivot).skip(c) {
                        *x -= factor * pv;
                    }
                }
            }
        }
        a[0][s] / a[0][0]
    }

    fn params(repair: Repair) -> MttdlParams {
        MttdlParams {
            mttf_hours: 1e6,
            device_capacity: 1e12,
            devices: 6,
            object_size: 1e6,
            metadata_size: 0.0,
            fill: 1.0,
            repair,
        }
    }

    fn mttdl(p: &MttdlParams, s: &str) -> Hours {
        evaluate(p, &[s.parse().unwrap()]).unwrap()[0].mttdl_exact
    }

    #[test]
    fn paper_falling_factorial_has_b_plus_one_factors() {
        assert_eq!(paper_falling_factorial(3, 2), 6.0); // 3·2·1
        assert_eq!(paper_falling_factorial(6, 2), 120.0); // 6·5·4
        assert_eq!(paper_falling_factorial(5, 0), 5.0);
        assert_eq!(
            paper_falling_factorial(14, 4),
            14.0 * 13.0 * 12.0 * 11.0 * 10.0
        );
        assert_eq!(paper_falling_factorial(3, 3), 0.0);
    }

    #[test]
    fn hand_computed_sets() {
        // Two-way mirror, exact: (3λ + μ) / (2λ²).
        let (l, mu) = (0.01, 0.5);
        let exact = mttdl_set_exact(2, 2, l, mu).unwrap().hours();
        assert!(
            rel(exact, (3.0 * l + mu) / (2.0 * l * l)) < 1e-12,
            "{exact}"
        );
        assert!(rel(exact, 2650.0) < 1e-12);
        // Eq. 2 for the mirror: μ / (2λ²).
        let approx = mttdl_set_approx(2, 2, l, mu).unwrap().hours();
        assert!(rel(approx, 2500.0) < 1e-12, "{approx}");

        // rep3, λ = 1e-6, μ = 1: T0 = 1/(3λ), T1 = (1 + T0)/(2λ), T2 = (1 + T1)/λ.
        let l = 1e-6;
        let t0 = 1.0 / (3.0 * l);
        let t1 = (1.0 + t0) / (2.0 * l);
        let t2 = (1.0 + t1) / l;
        let exact = mttdl_set_exact(3, 3, l, 1.0).unwrap().hours();
        assert!(rel(exact, t0 + t1 + t2) < 1e-12);
        let approx = mttdl_set_approx(3, 3, l, 1.0).unwrap().hours();
        assert!(rel(approx, 1.0 / (6.0 * 1e-18)) < 1e-12);

        // split4+2: μ² / (6·5·4·λ³).
        let approx = mttdl_set_approx(6, 3, 1e-5, 2.0).unwrap().hours();
        assert!(rel(approx, 4.0 / (120.0 * 1e-15)) < 1e-12);

        // f = 1: the chain is one exponential of rate Nλ.
        let one = mttdl_set_exact(4, 1, 0.25, 7.0).unwrap().hours();
        assert!(rel(one, 1.0) < 1e-12);
    }

    #[test]
    fn exact_matches_an_independent_linear_solve() {
        for &(n, f) in &[(2, 2), (3, 3), (6, 3), (9, 4), (14, 5), (4, 1)] {
            for &ratio in &[0.5, 10.0, 1e3] {
                let (l, mu) = (1e-3, 1e-3 * ratio);
                let ours = mttdl_set_exact(n, f, l, mu).unwrap().hours();
                let theirs = chain_by_linear_solve(n, f, l, mu);
                assert!(
                    rel(ours, theirs) < 1e-6,
                    "N={n} f={f} ratio={ratio}: {ours} vs {theirs}"
                );
            }
        }
    }

    #[test]
    fn approximation_converges_to_exact_when_repair_is_fast() {
        for &(n, f) in &[(2, 2), (3, 3), (6, 3), (9, 4), (14, 5)] {
            let mut last = f64::INFINITY;
            for &ratio in &[1e2, 1e4, 1e6, 1e9, 1e12] {
                let l = 5e-7;
                let exact = mttdl_set_exact(n, f, l, l * ratio).unwrap();
                let approx = mttdl_set_approx(n, f, l, l * ratio).unwrap();
                // Eq. 2 keeps only the leading term, so it is always below the chain.
                assert!(approx <= exact);
                let err = (exact.ln() - approx.ln()).abs();
                assert!(err < last, "N={n} f={f}: error grew at ratio {ratio}");
                // The first neglected term is O(N·λ/μ) relative to the leading one.
                assert!(
                    err <= 2.0 * f64::from(n * n) / ratio,
                    "N={n} f={f} ratio={ratio}: {err}"
                );
                last = err;
            }
            assert!(last < 1e-9);
        }
        // The usual falling factorial (b factors) would be off by N - f + 1 = 4 for split4+2.
        let exact = mttdl_set_exact(6, 3, 1e-6, 1e3).unwrap().hours();
        let usual = 1e6 / (6.0 * 5.0 * 1e-18);
        assert!(rel(usual / exact, 4.0) < 1e-6);
    }

    #[test]
    fn log_space_survives_past_f64_max() {
        // 30 parities, μ/λ = 1e12: ~1e360 hours.
        let h = mttdl_set_exact(40, 31, 1e-6, 1e6).unwrap();
        assert_eq!(h.hours(), f64::INFINITY);
        assert!(h.log10_hours() > 308.0 && h.log10_hours().is_finite());
        let a = mttdl_set_approx(40, 31, 1e-6, 1e6).unwrap();
        assert!((h.ln() - a.ln()).abs() < 1e-3);
        let s = h.to_string();
        assert!(s.contains('e') && !s.contains("inf"), "{s}");
    }

    #[test]
    fn formats() {
        assert_eq!(format_log10(2.0f64.log10()), "2.00");
        assert_eq!(format_log10(83333.3f64.log10()), "83333");
        assert_eq!(format_log10(4.02e31f64.log10()), "4.02e31");
        assert_eq!(format_log10(9.999e31f64.log10()), "1.00e32");
        assert_eq!(format_log10(1.5e-7f64.log10()), "1.50e-7");
        assert_eq!(format_log10(0.5f64.log10()), "0.500");
        assert_eq!(Frac::new(4, 14).to_string(), "4/14");
        assert_eq!(
            FracRange {
                lo: Frac::new(1, 4),
                hi: Frac::new(1, 1)
            }
            .to_string(),
            "[1/4, 1]"
        );
    }

    #[test]
    fn labels_round_trip() {
        for s in [
            "hash",
            "rep3",
            "split4+2",
            "pack4+2",
            "split10+4",
            "raid1x3",
            "raid6x6",
            "raid5x5",
            "raid8+3",
        ] {
            assert_eq!(s.parse::<MttdlScheme>().unwrap().to_string(), s);
        }
        assert_eq!(
            "raid6x6".parse::<MttdlScheme>().unwrap(),
            MttdlScheme::RaidParity { k: 4, m: 2 }
        );
        for bad in [
            "", "rep", "rep0", "split4", "split0+2", "pack4-2", "raid6x2", "mirror",
        ] {
            assert!(bad.parse::<MttdlScheme>().is_err(), "{bad}");
        }
    }

    #[test]
    fn system_mttdl_by_hand() {
        // rep3, 6 devices of 1 TB, 1 MB objects, MTTF 1e6 h, μ = 1/h.
        let p = params(Repair::Rate { per_hour: 1.0 });
        let row = &evaluate(&p, &["rep3".parse().unwrap()]).unwrap()[0];
        assert_eq!((row.f, row.set_width), (3, 3));
        // N_RS = 6e12 / (3·1e6) = 2e6 sets.
        assert!(rel(row.n_rs, 2e6) < 1e-12);
        // MTTDL_set ≈ μ² / (6λ³) = 1/(6e-18); MTTDL = that / 2e6.
        assert!(rel(row.mttdl_approx.hours(), 1.0 / 6e-18 / 2e6) < 1e-12);
        assert!(rel(row.mttdl_exact.hours(), row.mttdl_approx.hours()) < 1e-5);
        assert!(
            rel(
                row.mttdl_approx.years(),
                row.mttdl_approx.hours() / HOURS_PER_YEAR
            ) < 1e-12
        );

        // Hashing: MTTF / devices.
        let row = &evaluate(&p, &[MttdlScheme::Hashing]).unwrap()[0];
        assert!(rel(row.mttdl_exact.hours(), 1e6 / 6.0) < 1e-12);
        assert_eq!(row.n_rs, 6.0);

        // Splitting 4+2 under a 100 MB/s rebuild: chunk 250 kB, μ = 1e8·3600/2.5e5 = 1.44e6/h,
        // N_RS = 6e12 / (6·2.5e5) = 4e6.
        let p = params(Repair::Throughput { bytes_per_sec: 1e8 });
        let row = &evaluate(&p, &["split4+2".parse().unwrap()]).unwrap()[0];
        assert!(rel(row.mu_per_hour.unwrap(), 1.44e6) < 1e-12);
        assert!(rel(row.n_rs, 4e6) < 1e-12);
        let want = 1.44e6f64.powi(2) / (120.0 * 1e-18) / 4e6;
        assert!(rel(row.mttdl_approx.hours(), want) < 1e-12);
        // Device rebuild: 1e12 bytes at 1e8 B/s = 10000 s.
        assert!(rel(row.costs.rebuild_hours.unwrap(), 1e4 / 3600.0) < 1e-12);

        // Packing N_RS = C / (n·(O + M)).
        let p = MttdlParams {
            metadata_size: 1e5,
            ..params(Repair::Rate { per_hour: 1.0 })
        };
        let row = &evaluate(&p, &["pack4+2".parse().unwrap()]).unwrap()[0];
        assert!(rel(row.n_rs, 6e12 / (6.0 * 1.1e6)) < 1e-12);

        // RAID 1 with a 100 MB/s rebuild: μ = 1/(1e4 s) per device, 2 groups of 3.
        let p = params(Repair::Throughput { bytes_per_sec: 1e8 });
        let row = &evaluate(&p, &["raid1x3".parse().unwrap()]).unwrap()[0];
        assert!(rel(row.mu_per_hour.unwrap(), 0.36) < 1e-12);
        assert_eq!(row.n_rs, 2.0);
    }

    #[test]
    fn more_parity_means_higher_mttdl() {
        for repair in [
            Repair::Rate { per_hour: 10.0 },
            Repair::Throughput { bytes_per_sec: 1e8 },
        ] {
            let p = MttdlParams {
                devices: 14,
                ..params(repair)
            };
            for kind in ["split", "pack"] {
                let a = mttdl(&p, &format!("{kind}4+1"));
                let b = mttdl(&p, &format!("{kind}4+2"));
                let c = mttdl(&p, &format!("{kind}4+3"));
                assert!(a < b && b < c, "{kind}: {a} {b} {c}");
            }
            let reps: Vec<Hours> = (1..=4).map(|r| mttdl(&p, &format!("rep{r}"))).collect();
            assert!(reps.windows(2).all(|w| w[0] < w[1]), "{reps:?}");
            assert!(mttdl(&p, "rep3") > mttdl(&p, "hash"));
            assert!(mttdl(&p, "raid6x6") > mttdl(&p, "raid5x5"));
        }
    }

    #[test]
    fn faster_repair_means_higher_mttdl() {
        for s in [
            "rep2",
            "rep3",
            "split4+2",
            "pack4+2",
            "split10+4",
            "raid1x3",
            "raid6x6",
        ] {
            let mut last: Option<Hours> = None;
            for rate in [1e-3, 1.0, 1e3, 1e6] {
                let p = MttdlParams {
                    devices: 14,
                    ..params(Repair::Rate { per_hour: rate })
                };
                let h = mttdl(&p, s);
                if let Some(prev) = last {
                    assert!(h > prev, "{s} at {rate}");
                }
                last = Some(h);
            }
        }
        // Hashing has nothing to repair.
        let slow = mttdl(&params(Repair::Rate { per_hour: 1.0 }), "hash");
        let fast = mttdl(&params(Repair::Rate { per_hour: 1e6 }), "hash");
        assert_eq!(slow, fast);
    }

    #[test]
    fn more_sets_means_lower_mttdl() {
        let base = params(Repair::Rate { per_hour: 10.0 });
        for s in ["rep3", "split4+2", "pack4+2"] {
            let bigger = MttdlParams {
                device_capacity: 4e12,
                ..base
            };
            let fuller = MttdlParams { fill: 0.25, ..base };
            let more_devices = MttdlParams {
                devices: 12,
                ..base
            };
            assert!(mttdl(&bigger, s) < mttdl(&base, s), "{s}");
            assert!(mttdl(&fuller, s) > mttdl(&base, s), "{s}");
            assert!(mttdl(&more_devices, s) < mttdl(&base, s), "{s}");
            // Eq. 1: four times the sets, a quarter of the MTTDL.
            let ratio = (mttdl(&base, s).ln() - mttdl(&bigger, s).ln()).exp();
            assert!(rel(ratio, 4.0) < 1e-12);
        }
        // RAID does not care how full it is, KVMD does.
        let empty = MttdlParams { fill: 0.1, ..base };
        assert_eq!(mttdl(&empty, "raid6x6"), mttdl(&base, "raid6x6"));
        // Same parity, more data objects: lower MTTDL_set (Table 3, ↑N ↓).
        let wide = MttdlParams {
            devices: 14,
            ..base
        };
        let set = |s: &str| evaluate(&wide, &[s.parse().unwrap()]).unwrap()[0].set_exact;
        assert!(set("split4+2") > set("split6+2") && set("split6+2") > set("split10+2"));
    }

    #[test]
    fn table4_numbers() {
        let p = MttdlParams {
            devices: 14,
            metadata_size: 1e4,
            ..params(Repair::Throughput { bytes_per_sec: 1e8 })
        };
        let schemes: Vec<MttdlScheme> = ["hash", "rep3", "split4+2", "pack4+2", "raid6x6"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        let rows = evaluate(&p, &schemes).unwrap();
        let c: Vec<&Table4Costs> = rows.iter().map(|r| &r.costs).collect();
        assert_eq!(c[1].writes.to_string(), "1/3");
        assert_eq!(c[1].space.to_string(), "1/3");
        assert_eq!(c[2].writes.to_string(), "1/6");
        assert_eq!(c[2].reads.to_string(), "[1/4, 1]");
        assert_eq!(c[2].space.to_string(), "4/6");
        // §4.2.1: 4 user writes become 4 + 2 parity + 8 metadata = 14 device writes.
        assert_eq!(c[3].writes.to_string(), "[1/8, 4/14]");
        assert_eq!(c[3].reads.to_string(), "1");
        assert_eq!(c[3].space.to_string(), "[1/3, 4/6]");
        assert_eq!(c[4].writes.to_string(), "[1/6, 4/6]");
        assert_eq!(c[4].space.to_string(), "4/6");
        // Packing WA, full group: (4 + 2 + 8·0.01) / 4 = 1.52; single object: 1 + 2 + 0.02.
        assert!(rel(c[3].write_amplification.0, 1.52) < 1e-12);
        assert!(rel(c[3].write_amplification.1, 3.02) < 1e-12);
        assert!(rel(c[3].space_with_metadata, 1.0 / 1.52) < 1e-12);
        assert_eq!(c[2].write_amplification, (1.5, 1.5));
        assert_eq!(c[4].write_amplification, (1.5, 3.0));
        assert_eq!(c[0].rebuild_hours, None);
        assert_eq!(c[0].rebuild_scale, RebuildScale::Impossible);
        assert_eq!(c[4].rebuild_scale, RebuildScale::DeviceCapacity);
        // Splitting restores 4× the members replication does, at a quarter of the size.
        assert!(
            rel(
                c[2].rebuild_units.unwrap(),
                4.0 * c[1].rebuild_units.unwrap()
            ) < 1e-12
        );
        assert!(rel(c[2].rebuild_hours.unwrap(), c[1].rebuild_hours.unwrap()) < 1e-12);
    }

    #[test]
    fn bad_parameters_are_rejected() {
        let ok = params(Repair::Rate { per_hour: 1.0 });
        let rep = ["rep3".parse::<MttdlScheme>().unwrap()];
        for bad in [
            MttdlParams {
                mttf_hours: 0.0,
                ..ok
            },
            MttdlParams { fill: 1.5, ..ok },
            MttdlParams { devices: 0, ..ok },
            MttdlParams {
                object_size: f64::NAN,
                ..ok
            },
            MttdlParams {
                repair: Repair::Throughput { bytes_per_sec: 0.0 },
                ..ok
            },
        ] {
            assert!(evaluate(&bad, &rep).is_err(), "{bad:?}");
        }
        let err = evaluate(&ok, &["split10+4".parse().unwrap()]).unwrap_err();
        assert!(matches!(
            err,
            MttdlError::SetTooWide {
                width: 14,
                devices: 6,
                ..
            }
        ));
        assert!(mttdl_set_exact(3, 4, 1.0, 1.0).is_err());
        assert!(mttdl_set_approx(3, 0, 1.0, 1.0).is_err());
    }
}
