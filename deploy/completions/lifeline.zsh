#compdef lifeline

autoload -U is-at-least

_lifeline() {
    typeset -A opt_args
    typeset -a _arguments_options
    local ret=1

    if is-at-least 5.2; then
        _arguments_options=(-s -S -C)
    else
        _arguments_options=(-s -C)
    fi

    local context curcontext="$curcontext" state line
    _arguments "${_arguments_options[@]}" : \
'--log-format=[Log format on stderr]:LOG_FORMAT:(text json)' \
'-h[Print help]' \
'--help[Print help]' \
'-V[Print version]' \
'--version[Print version]' \
":: :_lifeline_commands" \
"*::: :->lifeline" \
&& ret=0
    case $state in
    (lifeline)
        words=($line[1] "${words[@]}")
        (( CURRENT += 1 ))
        curcontext="${curcontext%:*:*}:lifeline-command-$line[1]:"
        case $line[1] in
            (man)
_arguments "${_arguments_options[@]}" : \
'--log-format=[Log format on stderr]:LOG_FORMAT:(text json)' \
'-h[Print help]' \
'--help[Print help]' \
'::subcommand -- A subcommand'\''s own page instead (`lifeline man serve`):_default' \
&& ret=0
;;
(completions)
_arguments "${_arguments_options[@]}" : \
'--log-format=[Log format on stderr]:LOG_FORMAT:(text json)' \
'-h[Print help]' \
'--help[Print help]' \
':shell:(bash elvish fish powershell zsh)' \
&& ret=0
;;
(serve)
_arguments "${_arguments_options[@]}" : \
'--config=[Config file (see lifeline.example.toml). Optional\: defaults apply]:CONFIG:_files' \
'--log-format=[Log format on stderr]:LOG_FORMAT:(text json)' \
'-h[Print help]' \
'--help[Print help]' \
&& ret=0
;;
(check-config)
_arguments "${_arguments_options[@]}" : \
'--config=[]:CONFIG:_files' \
'--log-format=[Log format on stderr]:LOG_FORMAT:(text json)' \
'-h[Print help]' \
'--help[Print help]' \
&& ret=0
;;
(demo)
_arguments "${_arguments_options[@]}" : \
'--listen=[HTTP address (dashboard, API)]:LISTEN:_default' \
'--grpc-listen=[gRPC address (agent signals, Lifeline'\''s health)]:GRPC_LISTEN:_default' \
'--agents=[]:AGENTS:_default' \
'--proxies=[]:PROXIES:_default' \
'--auth-servers=[]:AUTH_SERVERS:_default' \
'--ttl=[Announce TTL of proxies, auth servers and agents (e.g. 30s, 1m)]:TTL:_default' \
'--chaos-period=[Time between chaos steps; 0 turns chaos off]:CHAOS_PERIOD:_default' \
'--seed=[]:SEED:_default' \
'--db=[SQLite file for the demo]:DB:_files' \
'--source=[The protocol the simulated cluster speaks\: Lifeline'\''s ClusterEvents, or Teleport'\''s Auth API over mutual TLS]:SOURCE:((lifeline\:"Lifeline'\''s open \`ClusterEvents\` protocol (plaintext, or \`https\://\`)"
teleport\:"Teleport'\''s own Auth API over mutual TLS with an identity file"))' \
'--legacy-share=[Share of simulated agents that ignore discovery TTLs (they stay on a dead proxy until Lifeline signals them)]:LEGACY_SHARE:_default' \
'--token=[The API token to sign in with (all roles); a random one is made and printed when not given]:TOKEN:_default' \
'--teleport-version=[With --source teleport\: the Teleport major version the simulated Auth plays. Before 18 it serves no grpc.health.v1 (Lifeline falls back to each Auth'\''s heartbeat), its INIT carries no WatchStatus, and a kind its role cannot read refuses the whole watch]:TELEPORT_VERSION:_default' \
'--config=[A TOML file whose \[notify\] and \[access\] sections the demo uses (whom to tell, more tokens); any other section is refused]:CONFIG:_files' \
'--log-format=[Log format on stderr]:LOG_FORMAT:(text json)' \
'--no-auto-reconnect[Leave stranded agents for you to reconnect from the dashboard (automatic reconnects are on by default)]' \
'--tls[Serve the dashboard, API and gRPC over TLS, with a throwaway CA made for this run (written next to --db; printed at start)]' \
'-h[Print help (see more with '\''--help'\'')]' \
'--help[Print help (see more with '\''--help'\'')]' \
&& ret=0
;;
(reconnect)
_arguments "${_arguments_options[@]}" : \
'(--stranded)--proxy=[The proxy whose tunnel the agent should leave (default\: its least healthy)]:PROXY:_default' \
'--reason=[Why, for the audit log]:REASON:_default' \
'--server=[Lifeline'\''s HTTP address]:SERVER:_default' \
'--wait=[How long to wait for the agents'\'' acks]:WAIT:_default' \
'--token=[API token with the update role]:TOKEN:_default' \
'--ca-file=[CA certificates (PEM) to trust for an https\:// --server, besides the system'\''s]:CA_FILE:_files' \
'--log-format=[Log format on stderr]:LOG_FORMAT:(text json)' \
'--stranded[Every agent Lifeline currently counts as stranded]' \
'-h[Print help]' \
'--help[Print help]' \
'::agent -- The agent to move (omit with --stranded):_default' \
&& ret=0
;;
(settings)
_arguments "${_arguments_options[@]}" : \
'--server=[Lifeline'\''s HTTP address]:SERVER:_default' \
'--token=[API token (read to get when reads need one; update to set and rm; also create with --confirm)]:TOKEN:_default' \
'--ca-file=[CA certificates (PEM) to trust for an https\:// --server, besides the system'\''s]:CA_FILE:_files' \
'--log-format=[Log format on stderr]:LOG_FORMAT:(text json)' \
'-h[Print help]' \
'--help[Print help]' \
":: :_lifeline__subcmd__settings_commands" \
"*::: :->settings" \
&& ret=0

    case $state in
    (settings)
        words=($line[1] "${words[@]}")
        (( CURRENT += 1 ))
        curcontext="${curcontext%:*:*}:lifeline-settings-command-$line[1]:"
        case $line[1] in
            (get)
_arguments "${_arguments_options[@]}" : \
'--server=[Lifeline'\''s HTTP address]:SERVER:_default' \
'--token=[API token (read to get when reads need one; update to set and rm; also create with --confirm)]:TOKEN:_default' \
'--ca-file=[CA certificates (PEM) to trust for an https\:// --server, besides the system'\''s]:CA_FILE:_files' \
'--log-format=[Log format on stderr]:LOG_FORMAT:(text json)' \
'-h[Print help]' \
'--help[Print help]' \
'::name:_default' \
&& ret=0
;;
(set)
_arguments "${_arguments_options[@]}" : \
'--server=[Lifeline'\''s HTTP address]:SERVER:_default' \
'--token=[API token (read to get when reads need one; update to set and rm; also create with --confirm)]:TOKEN:_default' \
'--ca-file=[CA certificates (PEM) to trust for an https\:// --server, besides the system'\''s]:CA_FILE:_files' \
'--log-format=[Log format on stderr]:LOG_FORMAT:(text json)' \
'-f[Overwrite a value that is not the default]' \
'--force[Overwrite a value that is not the default]' \
'--confirm[With --force\: overwrite a value the config file manages, until the next restart (needs the create role)]' \
'-h[Print help]' \
'--help[Print help]' \
':name:_default' \
':value:_default' \
&& ret=0
;;
(rm)
_arguments "${_arguments_options[@]}" : \
'--server=[Lifeline'\''s HTTP address]:SERVER:_default' \
'--token=[API token (read to get when reads need one; update to set and rm; also create with --confirm)]:TOKEN:_default' \
'--ca-file=[CA certificates (PEM) to trust for an https\:// --server, besides the system'\''s]:CA_FILE:_files' \
'--log-format=[Log format on stderr]:LOG_FORMAT:(text json)' \
'-h[Print help]' \
'--help[Print help]' \
':name:_default' \
&& ret=0
;;
(help)
_arguments "${_arguments_options[@]}" : \
":: :_lifeline__subcmd__settings__subcmd__help_commands" \
"*::: :->help" \
&& ret=0

    case $state in
    (help)
        words=($line[1] "${words[@]}")
        (( CURRENT += 1 ))
        curcontext="${curcontext%:*:*}:lifeline-settings-help-command-$line[1]:"
        case $line[1] in
            (get)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(set)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(rm)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(help)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
        esac
    ;;
esac
;;
        esac
    ;;
esac
;;
(maintenance)
_arguments "${_arguments_options[@]}" : \
'--server=[Lifeline'\''s HTTP address]:SERVER:_default' \
'--token=[API token (update to start and end; read to list when reads need one)]:TOKEN:_default' \
'--ca-file=[CA certificates (PEM) to trust for an https\:// --server, besides the system'\''s]:CA_FILE:_files' \
'--log-format=[Log format on stderr]:LOG_FORMAT:(text json)' \
'-h[Print help]' \
'--help[Print help]' \
":: :_lifeline__subcmd__maintenance_commands" \
"*::: :->maintenance" \
&& ret=0

    case $state in
    (maintenance)
        words=($line[1] "${words[@]}")
        (( CURRENT += 1 ))
        curcontext="${curcontext%:*:*}:lifeline-maintenance-command-$line[1]:"
        case $line[1] in
            (start)
_arguments "${_arguments_options[@]}" : \
'*--target=[\`proxy/NAME\`, \`auth_server/NAME\` or \`agent/NAME\`; globs (\`*\`, \`?\`, \`\[a-z\]\`) allowed. Repeat for several]:TARGETS:_default' \
'(--until)--for=[How long it lasts from its start (\`2h\`, \`30m\`)]:LENGTH:_default' \
'--until=[When it ends (RFC 3339)]:UNTIL:_default' \
'--from=[When it starts (RFC 3339; default now)]:FROM:_default' \
'--reason=[Why\: shown on the dashboard and audited]:REASON:_default' \
'--server=[Lifeline'\''s HTTP address]:SERVER:_default' \
'--token=[API token (update to start and end; read to list when reads need one)]:TOKEN:_default' \
'--ca-file=[CA certificates (PEM) to trust for an https\:// --server, besides the system'\''s]:CA_FILE:_files' \
'--log-format=[Log format on stderr]:LOG_FORMAT:(text json)' \
'--all[The window covers every agent or proxy (\`agent/*\`)\: say so]' \
'-h[Print help]' \
'--help[Print help]' \
&& ret=0
;;
(end)
_arguments "${_arguments_options[@]}" : \
'--server=[Lifeline'\''s HTTP address]:SERVER:_default' \
'--token=[API token (update to start and end; read to list when reads need one)]:TOKEN:_default' \
'--ca-file=[CA certificates (PEM) to trust for an https\:// --server, besides the system'\''s]:CA_FILE:_files' \
'--log-format=[Log format on stderr]:LOG_FORMAT:(text json)' \
'-h[Print help]' \
'--help[Print help]' \
':id:_default' \
&& ret=0
;;
(delete)
_arguments "${_arguments_options[@]}" : \
'--server=[Lifeline'\''s HTTP address]:SERVER:_default' \
'--token=[API token (update to start and end; read to list when reads need one)]:TOKEN:_default' \
'--ca-file=[CA certificates (PEM) to trust for an https\:// --server, besides the system'\''s]:CA_FILE:_files' \
'--log-format=[Log format on stderr]:LOG_FORMAT:(text json)' \
'-h[Print help]' \
'--help[Print help]' \
':id:_default' \
&& ret=0
;;
(list)
_arguments "${_arguments_options[@]}" : \
'--server=[Lifeline'\''s HTTP address]:SERVER:_default' \
'--token=[API token (update to start and end; read to list when reads need one)]:TOKEN:_default' \
'--ca-file=[CA certificates (PEM) to trust for an https\:// --server, besides the system'\''s]:CA_FILE:_files' \
'--log-format=[Log format on stderr]:LOG_FORMAT:(text json)' \
'--all[]' \
'-h[Print help]' \
'--help[Print help]' \
&& ret=0
;;
(help)
_arguments "${_arguments_options[@]}" : \
":: :_lifeline__subcmd__maintenance__subcmd__help_commands" \
"*::: :->help" \
&& ret=0

    case $state in
    (help)
        words=($line[1] "${words[@]}")
        (( CURRENT += 1 ))
        curcontext="${curcontext%:*:*}:lifeline-maintenance-help-command-$line[1]:"
        case $line[1] in
            (start)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(end)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(delete)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(list)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(help)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
        esac
    ;;
esac
;;
        esac
    ;;
esac
;;
(alert-rules)
_arguments "${_arguments_options[@]}" : \
'--config=[Config file, for \`server.external_url\`]:CONFIG:_files' \
'--external-url=[Where the dashboard is reached (overrides server.external_url)]:EXTERNAL_URL:_default' \
'--stranded-for=[How long a root cause may strand agents before it alerts]:STRANDED_FOR:_default' \
'--log-format=[Log format on stderr]:LOG_FORMAT:(text json)' \
'--kubernetes[Print a Prometheus Operator PrometheusRule instead of a rules file]' \
'-h[Print help]' \
'--help[Print help]' \
&& ret=0
;;
(grafana-dashboard)
_arguments "${_arguments_options[@]}" : \
'--config=[Config file, for \`server.external_url\`]:CONFIG:_files' \
'--external-url=[Where the dashboard is reached (overrides server.external_url)]:EXTERNAL_URL:_default' \
'--log-format=[Log format on stderr]:LOG_FORMAT:(text json)' \
'--kubernetes[Print a ConfigMap for Grafana'\''s dashboard sidecar instead]' \
'-h[Print help]' \
'--help[Print help]' \
&& ret=0
;;
(token)
_arguments "${_arguments_options[@]}" : \
'--log-format=[Log format on stderr]:LOG_FORMAT:(text json)' \
'-h[Print help]' \
'--help[Print help]' \
":: :_lifeline__subcmd__token_commands" \
"*::: :->token" \
&& ret=0

    case $state in
    (token)
        words=($line[1] "${words[@]}")
        (( CURRENT += 1 ))
        curcontext="${curcontext%:*:*}:lifeline-token-command-$line[1]:"
        case $line[1] in
            (new)
_arguments "${_arguments_options[@]}" : \
'--name=[The name the audit and the dashboard show]:NAME:_default' \
'*--roles=[Roles (comma-separated)]:ROLES:((read\:"GET anything (when reads need a token at all)"
update\:"PUT and DELETE settings, manual reconnects"
create\:"In addition to \`update\`\: overwrite a setting the config file manages"))' \
'--log-format=[Log format on stderr]:LOG_FORMAT:(text json)' \
'(--roles)--join[Make an agents'\'' join token instead of an API token]' \
'-h[Print help (see more with '\''--help'\'')]' \
'--help[Print help (see more with '\''--help'\'')]' \
&& ret=0
;;
(help)
_arguments "${_arguments_options[@]}" : \
":: :_lifeline__subcmd__token__subcmd__help_commands" \
"*::: :->help" \
&& ret=0

    case $state in
    (help)
        words=($line[1] "${words[@]}")
        (( CURRENT += 1 ))
        curcontext="${curcontext%:*:*}:lifeline-token-help-command-$line[1]:"
        case $line[1] in
            (new)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(help)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
        esac
    ;;
esac
;;
        esac
    ;;
esac
;;
(help)
_arguments "${_arguments_options[@]}" : \
":: :_lifeline__subcmd__help_commands" \
"*::: :->help" \
&& ret=0

    case $state in
    (help)
        words=($line[1] "${words[@]}")
        (( CURRENT += 1 ))
        curcontext="${curcontext%:*:*}:lifeline-help-command-$line[1]:"
        case $line[1] in
            (man)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(completions)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(serve)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(check-config)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(demo)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(reconnect)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(settings)
_arguments "${_arguments_options[@]}" : \
":: :_lifeline__subcmd__help__subcmd__settings_commands" \
"*::: :->settings" \
&& ret=0

    case $state in
    (settings)
        words=($line[1] "${words[@]}")
        (( CURRENT += 1 ))
        curcontext="${curcontext%:*:*}:lifeline-help-settings-command-$line[1]:"
        case $line[1] in
            (get)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(set)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(rm)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
        esac
    ;;
esac
;;
(maintenance)
_arguments "${_arguments_options[@]}" : \
":: :_lifeline__subcmd__help__subcmd__maintenance_commands" \
"*::: :->maintenance" \
&& ret=0

    case $state in
    (maintenance)
        words=($line[1] "${words[@]}")
        (( CURRENT += 1 ))
        curcontext="${curcontext%:*:*}:lifeline-help-maintenance-command-$line[1]:"
        case $line[1] in
            (start)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(end)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(delete)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(list)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
        esac
    ;;
esac
;;
(alert-rules)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(grafana-dashboard)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(token)
_arguments "${_arguments_options[@]}" : \
":: :_lifeline__subcmd__help__subcmd__token_commands" \
"*::: :->token" \
&& ret=0

    case $state in
    (token)
        words=($line[1] "${words[@]}")
        (( CURRENT += 1 ))
        curcontext="${curcontext%:*:*}:lifeline-help-token-command-$line[1]:"
        case $line[1] in
            (new)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
        esac
    ;;
esac
;;
(help)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
        esac
    ;;
esac
;;
        esac
    ;;
esac
}

(( $+functions[_lifeline_commands] )) ||
_lifeline_commands() {
    local commands; commands=(
'man:Print the manual page (roff)\: \`lifeline man | man -l -\`' \
'completions:Print a completion script for a shell (bash, zsh, fish, elvish, powershell)' \
'serve:Run against a real cluster, configured by a TOML file and LIFELINE_* variables' \
'check-config:Validate a config file (with LIFELINE_* overrides) and print the result' \
'demo:Run Lifeline with a simulated cluster and chaos; dashboard on localhost' \
'reconnect:Ask agents to reconnect through a running Lifeline'\''s REST API, and print what became of each signal. Exits non-zero unless every signal was acked' \
'settings:Read and change the dynamic settings of a running Lifeline (RFD 0016)' \
'maintenance:Declare, end and list maintenance windows of a running Lifeline\: while one is active, the strandings it explains are planned (shown, not acted on automatically, not notified)' \
'alert-rules:Print Prometheus alerting rules (YAML) over Lifeline'\''s metrics' \
'grafana-dashboard:Print a Grafana dashboard (JSON, for import) over Lifeline'\''s metrics' \
'token:Make API and join tokens' \
'help:Print this message or the help of the given subcommand(s)' \
    )
    _describe -t commands 'lifeline commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__alert-rules_commands] )) ||
_lifeline__subcmd__alert-rules_commands() {
    local commands; commands=()
    _describe -t commands 'lifeline alert-rules commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__check-config_commands] )) ||
_lifeline__subcmd__check-config_commands() {
    local commands; commands=()
    _describe -t commands 'lifeline check-config commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__completions_commands] )) ||
_lifeline__subcmd__completions_commands() {
    local commands; commands=()
    _describe -t commands 'lifeline completions commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__demo_commands] )) ||
_lifeline__subcmd__demo_commands() {
    local commands; commands=()
    _describe -t commands 'lifeline demo commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__grafana-dashboard_commands] )) ||
_lifeline__subcmd__grafana-dashboard_commands() {
    local commands; commands=()
    _describe -t commands 'lifeline grafana-dashboard commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__help_commands] )) ||
_lifeline__subcmd__help_commands() {
    local commands; commands=(
'man:Print the manual page (roff)\: \`lifeline man | man -l -\`' \
'completions:Print a completion script for a shell (bash, zsh, fish, elvish, powershell)' \
'serve:Run against a real cluster, configured by a TOML file and LIFELINE_* variables' \
'check-config:Validate a config file (with LIFELINE_* overrides) and print the result' \
'demo:Run Lifeline with a simulated cluster and chaos; dashboard on localhost' \
'reconnect:Ask agents to reconnect through a running Lifeline'\''s REST API, and print what became of each signal. Exits non-zero unless every signal was acked' \
'settings:Read and change the dynamic settings of a running Lifeline (RFD 0016)' \
'maintenance:Declare, end and list maintenance windows of a running Lifeline\: while one is active, the strandings it explains are planned (shown, not acted on automatically, not notified)' \
'alert-rules:Print Prometheus alerting rules (YAML) over Lifeline'\''s metrics' \
'grafana-dashboard:Print a Grafana dashboard (JSON, for import) over Lifeline'\''s metrics' \
'token:Make API and join tokens' \
'help:Print this message or the help of the given subcommand(s)' \
    )
    _describe -t commands 'lifeline help commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__help__subcmd__alert-rules_commands] )) ||
_lifeline__subcmd__help__subcmd__alert-rules_commands() {
    local commands; commands=()
    _describe -t commands 'lifeline help alert-rules commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__help__subcmd__check-config_commands] )) ||
_lifeline__subcmd__help__subcmd__check-config_commands() {
    local commands; commands=()
    _describe -t commands 'lifeline help check-config commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__help__subcmd__completions_commands] )) ||
_lifeline__subcmd__help__subcmd__completions_commands() {
    local commands; commands=()
    _describe -t commands 'lifeline help completions commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__help__subcmd__demo_commands] )) ||
_lifeline__subcmd__help__subcmd__demo_commands() {
    local commands; commands=()
    _describe -t commands 'lifeline help demo commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__help__subcmd__grafana-dashboard_commands] )) ||
_lifeline__subcmd__help__subcmd__grafana-dashboard_commands() {
    local commands; commands=()
    _describe -t commands 'lifeline help grafana-dashboard commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__help__subcmd__help_commands] )) ||
_lifeline__subcmd__help__subcmd__help_commands() {
    local commands; commands=()
    _describe -t commands 'lifeline help help commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__help__subcmd__maintenance_commands] )) ||
_lifeline__subcmd__help__subcmd__maintenance_commands() {
    local commands; commands=(
'start:Start a window (now, or at --from) for --for or until --until' \
'end:End a window now' \
'delete:Delete a window (its audit stays)' \
'list:List windows, newest first (only those not over, unless --all)' \
    )
    _describe -t commands 'lifeline help maintenance commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__help__subcmd__maintenance__subcmd__delete_commands] )) ||
_lifeline__subcmd__help__subcmd__maintenance__subcmd__delete_commands() {
    local commands; commands=()
    _describe -t commands 'lifeline help maintenance delete commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__help__subcmd__maintenance__subcmd__end_commands] )) ||
_lifeline__subcmd__help__subcmd__maintenance__subcmd__end_commands() {
    local commands; commands=()
    _describe -t commands 'lifeline help maintenance end commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__help__subcmd__maintenance__subcmd__list_commands] )) ||
_lifeline__subcmd__help__subcmd__maintenance__subcmd__list_commands() {
    local commands; commands=()
    _describe -t commands 'lifeline help maintenance list commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__help__subcmd__maintenance__subcmd__start_commands] )) ||
_lifeline__subcmd__help__subcmd__maintenance__subcmd__start_commands() {
    local commands; commands=()
    _describe -t commands 'lifeline help maintenance start commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__help__subcmd__man_commands] )) ||
_lifeline__subcmd__help__subcmd__man_commands() {
    local commands; commands=()
    _describe -t commands 'lifeline help man commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__help__subcmd__reconnect_commands] )) ||
_lifeline__subcmd__help__subcmd__reconnect_commands() {
    local commands; commands=()
    _describe -t commands 'lifeline help reconnect commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__help__subcmd__serve_commands] )) ||
_lifeline__subcmd__help__subcmd__serve_commands() {
    local commands; commands=()
    _describe -t commands 'lifeline help serve commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__help__subcmd__settings_commands] )) ||
_lifeline__subcmd__help__subcmd__settings_commands() {
    local commands; commands=(
'get:Show every setting, or one with its history' \
'set:Set a setting (origin becomes \`dynamic\`). The value is JSON when it parses as JSON (\`true\`, \`0.3\`, \`{...}\`), a string otherwise (\`6h\`)' \
'rm:Reset a setting to its default (refused for config-file settings)' \
    )
    _describe -t commands 'lifeline help settings commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__help__subcmd__settings__subcmd__get_commands] )) ||
_lifeline__subcmd__help__subcmd__settings__subcmd__get_commands() {
    local commands; commands=()
    _describe -t commands 'lifeline help settings get commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__help__subcmd__settings__subcmd__rm_commands] )) ||
_lifeline__subcmd__help__subcmd__settings__subcmd__rm_commands() {
    local commands; commands=()
    _describe -t commands 'lifeline help settings rm commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__help__subcmd__settings__subcmd__set_commands] )) ||
_lifeline__subcmd__help__subcmd__settings__subcmd__set_commands() {
    local commands; commands=()
    _describe -t commands 'lifeline help settings set commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__help__subcmd__token_commands] )) ||
_lifeline__subcmd__help__subcmd__token_commands() {
    local commands; commands=(
'new:Print a new random token and the config lines that admit it (only its SHA-256 goes in the config file)' \
    )
    _describe -t commands 'lifeline help token commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__help__subcmd__token__subcmd__new_commands] )) ||
_lifeline__subcmd__help__subcmd__token__subcmd__new_commands() {
    local commands; commands=()
    _describe -t commands 'lifeline help token new commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__maintenance_commands] )) ||
_lifeline__subcmd__maintenance_commands() {
    local commands; commands=(
'start:Start a window (now, or at --from) for --for or until --until' \
'end:End a window now' \
'delete:Delete a window (its audit stays)' \
'list:List windows, newest first (only those not over, unless --all)' \
'help:Print this message or the help of the given subcommand(s)' \
    )
    _describe -t commands 'lifeline maintenance commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__maintenance__subcmd__delete_commands] )) ||
_lifeline__subcmd__maintenance__subcmd__delete_commands() {
    local commands; commands=()
    _describe -t commands 'lifeline maintenance delete commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__maintenance__subcmd__end_commands] )) ||
_lifeline__subcmd__maintenance__subcmd__end_commands() {
    local commands; commands=()
    _describe -t commands 'lifeline maintenance end commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__maintenance__subcmd__help_commands] )) ||
_lifeline__subcmd__maintenance__subcmd__help_commands() {
    local commands; commands=(
'start:Start a window (now, or at --from) for --for or until --until' \
'end:End a window now' \
'delete:Delete a window (its audit stays)' \
'list:List windows, newest first (only those not over, unless --all)' \
'help:Print this message or the help of the given subcommand(s)' \
    )
    _describe -t commands 'lifeline maintenance help commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__maintenance__subcmd__help__subcmd__delete_commands] )) ||
_lifeline__subcmd__maintenance__subcmd__help__subcmd__delete_commands() {
    local commands; commands=()
    _describe -t commands 'lifeline maintenance help delete commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__maintenance__subcmd__help__subcmd__end_commands] )) ||
_lifeline__subcmd__maintenance__subcmd__help__subcmd__end_commands() {
    local commands; commands=()
    _describe -t commands 'lifeline maintenance help end commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__maintenance__subcmd__help__subcmd__help_commands] )) ||
_lifeline__subcmd__maintenance__subcmd__help__subcmd__help_commands() {
    local commands; commands=()
    _describe -t commands 'lifeline maintenance help help commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__maintenance__subcmd__help__subcmd__list_commands] )) ||
_lifeline__subcmd__maintenance__subcmd__help__subcmd__list_commands() {
    local commands; commands=()
    _describe -t commands 'lifeline maintenance help list commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__maintenance__subcmd__help__subcmd__start_commands] )) ||
_lifeline__subcmd__maintenance__subcmd__help__subcmd__start_commands() {
    local commands; commands=()
    _describe -t commands 'lifeline maintenance help start commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__maintenance__subcmd__list_commands] )) ||
_lifeline__subcmd__maintenance__subcmd__list_commands() {
    local commands; commands=()
    _describe -t commands 'lifeline maintenance list commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__maintenance__subcmd__start_commands] )) ||
_lifeline__subcmd__maintenance__subcmd__start_commands() {
    local commands; commands=()
    _describe -t commands 'lifeline maintenance start commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__man_commands] )) ||
_lifeline__subcmd__man_commands() {
    local commands; commands=()
    _describe -t commands 'lifeline man commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__reconnect_commands] )) ||
_lifeline__subcmd__reconnect_commands() {
    local commands; commands=()
    _describe -t commands 'lifeline reconnect commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__serve_commands] )) ||
_lifeline__subcmd__serve_commands() {
    local commands; commands=()
    _describe -t commands 'lifeline serve commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__settings_commands] )) ||
_lifeline__subcmd__settings_commands() {
    local commands; commands=(
'get:Show every setting, or one with its history' \
'set:Set a setting (origin becomes \`dynamic\`). The value is JSON when it parses as JSON (\`true\`, \`0.3\`, \`{...}\`), a string otherwise (\`6h\`)' \
'rm:Reset a setting to its default (refused for config-file settings)' \
'help:Print this message or the help of the given subcommand(s)' \
    )
    _describe -t commands 'lifeline settings commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__settings__subcmd__get_commands] )) ||
_lifeline__subcmd__settings__subcmd__get_commands() {
    local commands; commands=()
    _describe -t commands 'lifeline settings get commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__settings__subcmd__help_commands] )) ||
_lifeline__subcmd__settings__subcmd__help_commands() {
    local commands; commands=(
'get:Show every setting, or one with its history' \
'set:Set a setting (origin becomes \`dynamic\`). The value is JSON when it parses as JSON (\`true\`, \`0.3\`, \`{...}\`), a string otherwise (\`6h\`)' \
'rm:Reset a setting to its default (refused for config-file settings)' \
'help:Print this message or the help of the given subcommand(s)' \
    )
    _describe -t commands 'lifeline settings help commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__settings__subcmd__help__subcmd__get_commands] )) ||
_lifeline__subcmd__settings__subcmd__help__subcmd__get_commands() {
    local commands; commands=()
    _describe -t commands 'lifeline settings help get commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__settings__subcmd__help__subcmd__help_commands] )) ||
_lifeline__subcmd__settings__subcmd__help__subcmd__help_commands() {
    local commands; commands=()
    _describe -t commands 'lifeline settings help help commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__settings__subcmd__help__subcmd__rm_commands] )) ||
_lifeline__subcmd__settings__subcmd__help__subcmd__rm_commands() {
    local commands; commands=()
    _describe -t commands 'lifeline settings help rm commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__settings__subcmd__help__subcmd__set_commands] )) ||
_lifeline__subcmd__settings__subcmd__help__subcmd__set_commands() {
    local commands; commands=()
    _describe -t commands 'lifeline settings help set commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__settings__subcmd__rm_commands] )) ||
_lifeline__subcmd__settings__subcmd__rm_commands() {
    local commands; commands=()
    _describe -t commands 'lifeline settings rm commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__settings__subcmd__set_commands] )) ||
_lifeline__subcmd__settings__subcmd__set_commands() {
    local commands; commands=()
    _describe -t commands 'lifeline settings set commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__token_commands] )) ||
_lifeline__subcmd__token_commands() {
    local commands; commands=(
'new:Print a new random token and the config lines that admit it (only its SHA-256 goes in the config file)' \
'help:Print this message or the help of the given subcommand(s)' \
    )
    _describe -t commands 'lifeline token commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__token__subcmd__help_commands] )) ||
_lifeline__subcmd__token__subcmd__help_commands() {
    local commands; commands=(
'new:Print a new random token and the config lines that admit it (only its SHA-256 goes in the config file)' \
'help:Print this message or the help of the given subcommand(s)' \
    )
    _describe -t commands 'lifeline token help commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__token__subcmd__help__subcmd__help_commands] )) ||
_lifeline__subcmd__token__subcmd__help__subcmd__help_commands() {
    local commands; commands=()
    _describe -t commands 'lifeline token help help commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__token__subcmd__help__subcmd__new_commands] )) ||
_lifeline__subcmd__token__subcmd__help__subcmd__new_commands() {
    local commands; commands=()
    _describe -t commands 'lifeline token help new commands' commands "$@"
}
(( $+functions[_lifeline__subcmd__token__subcmd__new_commands] )) ||
_lifeline__subcmd__token__subcmd__new_commands() {
    local commands; commands=()
    _describe -t commands 'lifeline token new commands' commands "$@"
}

if [ "$funcstack[1]" = "_lifeline" ]; then
    _lifeline "$@"
else
    compdef _lifeline lifeline
fi
