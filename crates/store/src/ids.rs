//! The random names the store gives things (chunks, uploads, buckets, versions, the array and
//! its devices). They come from the operating system's generator, except on a thread where a
//! simulation has seeded them ([`seed_ids_on_this_thread`]): there they come from a generator
//! seeded by the simulation, so that a simulated seed places every object on the same devices
//! each time it runs and replays exactly.

use rand::distributions::{Distribution, Standard};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::cell::RefCell;

thread_local! {
    static SEEDED: RefCell<Option<ChaCha8Rng>> = const { RefCell::new(None) };
}

/// From now on, ids made on this thread come from a generator seeded with `seed`; `None` goes
/// back to the operating system's. For simulations, whose store runs on one thread.
pub fn seed_ids_on_this_thread(seed: Option<u64>) {
    SEEDED.with(|s| *s.borrow_mut() = seed.map(ChaCha8Rng::seed_from_u64));
}

/// A random 64-bit id for things named beside the store (volumes), from the same generator.
pub fn random_id() -> u64 {
    random()
}

/// A random value for an id.
pub(crate) fn random<T>() -> T
where
    Standard: Distribution<T>,
{
    SEEDED.with(|s| match s.borrow_mut().as_mut() {
        Some(rng) => rng.gen(),
        None => rand::random(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_ids_repeat_and_unseeded_ones_do_not() {
        let draw = || (0..4).map(|_| random::<u64>()).collect::<Vec<_>>();
        seed_ids_on_this_thread(Some(7));
        let a = draw();
        seed_ids_on_this_thread(Some(7));
        assert_eq!(draw(), a);
        seed_ids_on_this_thread(None);
        assert_ne!(draw(), a);
    }
}
