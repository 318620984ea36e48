// Package dashboards holds the test that keeps the Grafana dashboard
// (docs/dashboards/trimtab.json) honest: every metric its PromQL names is
// registered by trimtab's real components (or exported by the model
// servers it scrapes), every label it matches on exists on that metric,
// and the dashboard is well-formed for Grafana (schema version, the
// ${DS_PROMETHEUS} datasource variable, a non-overlapping grid). The
// package has no code.
package dashboards
