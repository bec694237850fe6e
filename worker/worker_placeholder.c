int mt_worker_placeholder;
