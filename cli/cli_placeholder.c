/* placeholder */
int mt_cli_placeholder;
