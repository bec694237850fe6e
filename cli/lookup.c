/* lookup.c */
int moetune_lookup_placeholder;
