//! Admission control of new connections, node-wide.

/// Admission control: a token bucket of new connections per second for the whole node.
#[derive(Debug)]
pub(crate) struct Admission {
    state: std::sync::Mutex<(f64, tokio::time::Instant)>,
    rate: f64,
    burst: f64,
}

impl Admission {
    pub(crate) fn new(rate: u32, burst: u32) -> Self {
        Self {
            state: std::sync::Mutex::new((f64::from(burst), tokio::time::Instant::now())),
            rate: f64::from(rate),
            burst: f64::from(burst),
        }
    }

    /// Takes one admission; false when the node admits no more connections now.
    pub(crate) fn admit(&self) -> bool {
        let mut st = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = tokio::time::Instant::now();
        let dt = now.saturating_duration_since(st.1).as_secs_f64();
        st.1 = now;
        st.0 = (st.0 + dt * self.rate).min(self.burst);
        if st.0 >= 1.0 {
            st.0 -= 1.0;
            true
        } else {
            false
        }
    }
}
