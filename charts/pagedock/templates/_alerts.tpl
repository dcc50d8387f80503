{{/* PromQL for templates/prometheusrule.yaml. Series are grouped by the labels a ServiceMonitor
scrape adds: namespace, service (<name>-engine, <name>-router) and pod. */}}

{{/* The fraction of first tokens slower than the TTFT objective, over a window; `le` names a
bucket bound of vllm:time_to_first_token_seconds. */}}
{{- define "pagedock.ttftSlowRatio" -}}
1 - (
  sum by (namespace, service) (
    rate(vllm:time_to_first_token_seconds_bucket{le="{{ .le }}"}[{{ .window }}])
  )
  /
  sum by (namespace, service) (rate(vllm:time_to_first_token_seconds_count[{{ .window }}]))
)
{{- end -}}

{{/* The fraction of requests that failed, over a window: engine requests that finished with
an error, and router requests that no replica could serve or that broke mid-stream. */}}
{{- define "pagedock.errorRatio" -}}
(
  sum by (namespace, service) (
    rate(vllm:request_success_total{finished_reason="error"}[{{ .window }}])
  )
  /
  sum by (namespace, service) (rate(vllm:request_success_total[{{ .window }}]))
)
or
(
  sum by (namespace, service) (rate(pagedock_router_failed_requests_total[{{ .window }}]))
  /
  sum by (namespace, service) (rate(pagedock_router_requests_total[{{ .window }}]))
)
{{- end -}}

{{/* Multi-window burn rate (Google's SRE workbook): the error budget (1 - objective) burns
`factor` times too fast over both the long and the short window. `ratio` names one of the two
templates above; `le` is passed through to it. */}}
{{- define "pagedock.burnRate" -}}
(
  {{- include .ratio (dict "window" .long "le" .le) | nindent 2 }}
) / (1 - {{ .objective }}) > {{ .factor }}
and
(
  {{- include .ratio (dict "window" .short "le" .le) | nindent 2 }}
) / (1 - {{ .objective }}) > {{ .factor }}
{{- end -}}

{{/* An alert's labels: its severity, then metrics.prometheusRule.alertLabels. */}}
{{- define "pagedock.alertLabels" -}}
severity: {{ .severity }}
{{- with .extra }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The two burn-rate alerts of each objective: a fast burn pages, a slow one warns. */}}
{{- define "pagedock.burnWindows" -}}
- {speed: Fast, long: 1h, short: 5m, factor: "14.4", for: 2m, severity: critical}
- {speed: Slow, long: 6h, short: 30m, factor: "6", for: 15m, severity: warning}
{{- end -}}
