"""Epoch time: measuring a node and its network (``distgcn calibrate``) and predicting a partition's epoch from
them (``distgcn stats DIR --predict-time``)."""
