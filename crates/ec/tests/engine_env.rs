//! `RAILSTORE_EC_ENGINE` forces the engine `Engine::auto` picks. Alone in its own test binary
//! because it changes the process environment.

use railstore_ec::{EcError, Engine, ENGINE_ENV};

#[test]
fn environment_forces_the_engine() {
    // SAFETY: this binary runs no other test, so nothing reads the environment concurrently.
    unsafe { std::env::set_var(ENGINE_ENV, "scalar") };
    assert_eq!(Engine::auto().unwrap(), Engine::Scalar);
    unsafe { std::env::set_var(ENGINE_ENV, "no-such-engine") };
    assert!(matches!(Engine::auto(), Err(EcError::UnknownEngine(_))));
    let unavailable = Engine::ALL.into_iter().find(|e| !e.is_available());
    if let Some(e) = unavailable {
        unsafe { std::env::set_var(ENGINE_ENV, e.name()) };
        assert_eq!(Engine::auto(), Err(EcError::EngineUnavailable(e.name())));
    }
    unsafe { std::env::remove_var(ENGINE_ENV) };
    assert_eq!(Engine::auto().unwrap(), Engine::detect());
    assert!(Engine::available().contains(&Engine::detect()));
}
