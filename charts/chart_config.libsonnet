// The mixin's _config for the chart's generated files (charts/provider-health-exporter/files/):
// every selector names the job by a placeholder the chart's templates replace with the job of
// the release (the helper provider-health-exporter.job in _helpers.tpl), and the dashboard's
// identity by placeholders replaced with the release's, so that every rule, inhibit rule and
// dashboard query the chart renders follows the release's name; the dashboard's job variable
// opens on the release's job.
{
  jobSelector: 'job="__PHE_JOB__"',
  dashboardUID: '__PHE_DASHBOARD_UID__',
  dashboardTitle: '__PHE_DASHBOARD_TITLE__',
  dashboardJobDefault: '__PHE_JOB__',
}
