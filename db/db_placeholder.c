/* placeholder */
int mt_db_placeholder;
