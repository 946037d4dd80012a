//! Measured runs one at a time, for benchmarks that change the server between runs
//! (`railstore bench repair` fails and rebuilds a device between them): the bucket made and the
//! objects stored once, then any number of runs of a workload through the S3 endpoint.

use super::*;

/// An endpoint with the plan's bucket and objects in place.
pub struct Session {
    plan: Plan,
    s3: Target,
    data: Bytes,
    runs: usize,
}

impl Session {
    /// Makes the bucket and stores the plan's objects (through `store` when it is the store
    /// behind the endpoint).
    pub async fn prepare(
        args: &LoadArgs,
        endpoint: &Endpoint,
        store: Option<&Store>,
    ) -> Result<Session> {
        let plan = args.plan()?;
        let s3 = Target::s3(endpoint).await?;
        make_bucket(&s3, &plan).await?;
        let data = object_data(plan.size_max_bytes, plan.seed);
        preload_via(args, &plan, &s3, store, &data).await?;
        settle(store).await?;
        Ok(Session {
            plan,
            s3,
            data,
            runs: 0,
        })
    }

    /// The plan every run follows.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Talks to `endpoint` from now on: the same store served again (after a restart), its
    /// objects already there.
    pub async fn reconnect(&mut self, endpoint: &Endpoint) -> Result<()> {
        self.s3 = Target::s3(endpoint).await?;
        Ok(())
    }

    /// One measured run of `workload` through the endpoint.
    pub async fn run(&mut self, args: &LoadArgs, workload: Workload) -> Result<RunResult> {
        let (r, _) = run_one(args, &self.plan, &self.s3, workload, self.runs, &self.data).await?;
        self.runs += 1;
        Ok(r)
    }
}
