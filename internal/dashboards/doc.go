// Package dashboards reads the Grafana dashboard (docs/dashboards/trimtab.json)
// and keeps it honest. Queries lists every PromQL expression the dashboard
// runs — panels, annotations, variables — also rewritten as plain PromQL a
// Prometheus server accepts, so a test can run each one against a
// Prometheus that scrapes a running trimtab. The package's own tests check
// that every metric the queries name is registered by trimtab's real
// components (or exported by the vLLM model servers it scrapes), that
// every label they match on exists on that metric, and that the dashboard
// is well-formed for Grafana (schema version, the ${DS_PROMETHEUS}
// datasource variable, a non-overlapping grid).
package dashboards
