int mt_coord_placeholder;
