SELECT boot, epoch FROM {boots} WHERE id = 1
